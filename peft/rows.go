package peft

import (
	"fmt"
	"math/bits"
	"slices"
	"strings"

	"github.com/posttrainllm/posttrainllm/mlx"
	"github.com/posttrainllm/posttrainllm/model"
)

// Rows stacks several adapters of one float base so that one forward
// pass applies to each row of a batch the adapter that row names, or none:
// batched generation decodes requests of different adapters in one step.
//
// For every projection some adapter adapts, the adapters' factors sit
// side by side: A [K, in] holds adapter n's A in rows offset(n)…
// offset(n)+rank(n)−1 (zeros where n leaves the projection alone), B
// [out, K] its B in the same columns, K the sum of the ranks rounded up
// to a power of two (the padding is zeros). A row's projection is
//
//	y = x·W0ᵀ + ((x·Aᵀ) ⊙ M)·Bᵀ
//
// with M [rows, K] holding the row's adapter's scale alpha/r in that
// adapter's columns and 0 elsewhere: one pair of matmuls serves every
// row, and a row of the base adds exact zeros, so it computes what the
// base alone computes. For DoRA the sum is then scaled per output by
// g = m/‖W0 + s·B·A‖, gathered per row from G [N, out] (row 0, the base's,
// and the rows of LoRA adapters hold ones). This is the function the
// unmerged Linears of each adapter compute.
//
// The work of the low-rank terms grows with the sum of the ranks stacked,
// not with the rows: every row multiplies every adapter's A and B, its
// mask keeping its own. Gathering each row's factors instead would copy
// rows × rank × (in + out) values per projection per step, more than the
// stacked factors hold while the adapters are fewer than the rows.
//
// Rows holds its own stacked copy of the adapters' factors (not of the
// base weights), built once by NewRows: it reads neither the adapters'
// arrays nor the base's afterwards, except the base weights the Linears
// are handed. DoRA's g depends on the base weights: build the Rows again
// when they change.
type Rows struct {
	// Targets are the base parameter indices some adapter adapts,
	// ascending.
	Targets []int
	dora    []bool // per target: some adapter is DoRA there, G is stacked
	offsets []int  // per adapter: its first column
	ranks   []int
	scales  []float64
	k, n    int
	arrays  []*mlx.Array // per target: A, B and, where dora, G
}

// NewRows stacks adapters (each with its arrays in its Specs order) over
// base, the float parameters they adapt. Adapters over a quantized base
// (Adapter.Quant) are refused. It runs on the MLX thread (mlx.Do); the
// stacked arrays are evaluated and outlive the caller's scope (Free
// releases them).
func NewRows(base []*mlx.Array, adapters []*Adapter, params [][]*mlx.Array) (*Rows, error) {
	if len(adapters) != len(params) {
		return nil, fmt.Errorf("peft: %d adapters with %d lists of arrays", len(adapters), len(params))
	}
	for n, a := range adapters {
		if a.Quant != nil {
			return nil, fmt.Errorf("peft: adapter %d was trained over a quantized base (%s); rows apply adapters over a float base only: fuse the adapter instead", n, a.Quant)
		}
		if err := a.check(base, params[n]); err != nil {
			return nil, fmt.Errorf("peft: adapter %d: %w", n, err)
		}
		if n > 0 && !sameLayout(a.Base, adapters[0].Base) {
			return nil, fmt.Errorf("peft: adapter %d adapts a model of another parameter layout than adapter 0", n)
		}
	}
	r := &Rows{n: pow2(len(adapters) + 1)}
	total := 0
	seen := map[int]bool{}
	for _, a := range adapters {
		r.offsets = append(r.offsets, total)
		r.ranks = append(r.ranks, a.Config.Rank)
		r.scales = append(r.scales, a.Config.Scale())
		total += a.Config.Rank
		for _, i := range a.Targets {
			seen[i] = true
		}
	}
	r.k = pow2(max(total, 1))
	for i := range seen {
		r.Targets = append(r.Targets, i)
	}
	slices.Sort(r.Targets)
	var err error
	err = mlx.Do(func() error {
		s := mlx.NewScope()
		defer s.Close()
		for _, i := range r.Targets {
			A, B, G := r.stack(base, adapters, params, i)
			r.arrays = append(r.arrays, A, B)
			r.dora = append(r.dora, G != nil)
			if G != nil {
				r.arrays = append(r.arrays, G)
			}
		}
		if err := mlx.Eval(r.arrays...); err != nil {
			return fmt.Errorf("peft: stacking adapters: %w", err)
		}
		s.Keep(r.arrays...)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return r, nil
}

// stack returns target i's stacked A [K, in], B [out, K] and, where some
// adapter is DoRA there, G [N, out] (nil otherwise).
func (r *Rows) stack(base []*mlx.Array, adapters []*Adapter, params [][]*mlx.Array, i int) (A, B, G *mlx.Array) {
	out, in := base[i].Dim(0), base[i].Dim(1)
	var as, bs, gs []*mlx.Array
	dora := false
	ones := mlx.Ones([]int{1, out}, mlx.Float32)
	gs = append(gs, ones) // the base's row
	for n, a := range adapters {
		j := slices.Index(a.Targets, i)
		if j < 0 {
			as = append(as, mlx.Zeros([]int{r.ranks[n], in}, mlx.Float32))
			bs = append(bs, mlx.Zeros([]int{out, r.ranks[n]}, mlx.Float32))
			gs = append(gs, ones)
			continue
		}
		k := a.perTarget()
		ad := params[n][j*k : (j+1)*k]
		as = append(as, mlx.AsType(ad[0], mlx.Float32))
		bs = append(bs, mlx.AsType(ad[1], mlx.Float32))
		if a.Config.Method != DoRA {
			gs = append(gs, ones)
			continue
		}
		dora = true
		w := mlx.Add(mlx.AsType(base[i], mlx.Float32), mlx.MulScalar(mlx.Matmul(ad[1], ad[0]), r.scales[n]))
		gs = append(gs, mlx.Reshape(mlx.Divide(mlx.AsType(ad[2], mlx.Float32), rowNorm(w)), 1, out))
	}
	if pad := r.k - r.offsetEnd(); pad > 0 {
		as = append(as, mlx.Zeros([]int{pad, in}, mlx.Float32))
		bs = append(bs, mlx.Zeros([]int{out, pad}, mlx.Float32))
	}
	A, B = mlx.Concatenate(as, 0), mlx.Concatenate(bs, 1)
	if !dora {
		return A, B, nil
	}
	for len(gs) < r.n {
		gs = append(gs, ones)
	}
	return A, B, mlx.Concatenate(gs, 0)
}

// offsetEnd is the number of columns the adapters use (before padding).
func (r *Rows) offsetEnd() int {
	if len(r.ranks) == 0 {
		return 0
	}
	last := len(r.ranks) - 1
	return r.offsets[last] + r.ranks[last]
}

// sameLayout reports whether two parameter layouts have the same names
// and shapes.
func sameLayout(a, b []model.ParamSpec) bool {
	return slices.EqualFunc(a, b, func(x, y model.ParamSpec) bool { return x.Name == y.Name && slices.Equal(x.Shape, y.Shape) })
}

// pow2 is the smallest power of two >= n (1 for n <= 1).
func pow2(n int) int {
	if n <= 1 {
		return 1
	}
	return 1 << bits.Len(uint(n-1))
}

// Arrays are the stacked arrays, to pass as inputs of a compiled function
// whose trace calls Linears with them.
func (r *Rows) Arrays() []*mlx.Array { return r.arrays }

// Layout names what the Linears' code depends on besides the arrays'
// shapes: the targets and which of them scale by DoRA's magnitudes. A
// compiled function that calls Linears is valid for Rows of one layout.
func (r *Rows) Layout() string {
	var b strings.Builder
	for t, i := range r.Targets {
		fmt.Fprintf(&b, "%d", i)
		if r.dora[t] {
			b.WriteByte('d')
		}
		b.WriteByte(',')
	}
	return b.String()
}

// Adapters is the number of adapters stacked.
func (r *Rows) Adapters() int { return len(r.ranks) }

// DoRA reports whether some adapter is DoRA: its magnitudes' scale g
// depends on the base weights, so the Rows must be built again when they
// change.
func (r *Rows) DoRA() bool { return slices.Contains(r.dora, true) }

// Select returns the per-row inputs of Linears for rows naming adapters
// by index (into NewRows' list; −1 for the base): the mask M [R, K]
// (float32) and the adapter index per row [R] (int32, 0 for the base, n+1
// for adapter n). Call on the MLX thread.
func (r *Rows) Select(rows []int) (mask, index *mlx.Array, err error) {
	R := len(rows)
	m := make([]float32, R*r.k)
	idx := make([]int32, R)
	for row, n := range rows {
		if n < -1 || n >= len(r.ranks) {
			return nil, nil, fmt.Errorf("peft: row %d names adapter %d of %d", row, n, len(r.ranks))
		}
		if n < 0 {
			continue
		}
		idx[row] = int32(n + 1)
		for c := r.offsets[n]; c < r.offsets[n]+r.ranks[n]; c++ {
			m[row*r.k+c] = float32(r.scales[n])
		}
	}
	return mlx.FromSlice(m, R, r.k), mlx.FromSlice(idx, R), nil
}

// Linears returns the model.Linears that apply to each row its adapter:
// base is the model's parameter list (the float base, as the pass takes
// it), arrays the stacked arrays (Arrays, or the inputs a compiled
// function received for them), mask and index Select's for the pass's
// rows in the order the projections see them.
func (r *Rows) Linears(base, arrays []*mlx.Array, mask, index *mlx.Array) model.Linears {
	lin := model.Linears{}
	at := 0
	for t, i := range r.Targets {
		A, B := arrays[at], arrays[at+1]
		at += 2
		arr := []*mlx.Array{base[i], A, B, mask}
		dora := r.dora[t]
		if dora {
			arr = append(arr, arrays[at], index)
			at++
		}
		lin[i] = model.Linear{Arrays: arr, Apply: func(x *mlx.Array, a []*mlx.Array) *mlx.Array {
			h := mlx.Multiply(mlx.Matmul(mlx.AsType(x, mlx.Float32), mlx.Transpose(a[1])), a[3])
			y := mlx.Add(plainMatmul(x, a[:1]), mlx.AsType(mlx.Matmul(h, mlx.Transpose(a[2])), x.Dtype()))
			if !dora {
				return y
			}
			return mlx.Multiply(y, mlx.AsType(mlx.Take(a[4], a[5], 0), x.Dtype()))
		}}
	}
	return lin
}

// Free releases the stacked arrays.
func (r *Rows) Free() {
	mlx.Free(r.arrays...)
	r.arrays = nil
}
