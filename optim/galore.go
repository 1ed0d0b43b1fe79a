package optim

import (
	"fmt"

	"github.com/posttrainllm/posttrainllm/mlx"
)

// GaLoreConfig configures GaLore (Zhao et al. 2024, "GaLore:
// Memory-Efficient LLM Training by Gradient Low-Rank Projection"): AdamW
// whose moments live in a rank-Rank subspace of each hidden matrix's
// gradient.
type GaLoreConfig struct {
	AdamW AdamWConfig
	// Rank is r, the dimension of the subspace; matrices whose smaller
	// side is below Rank are updated by plain AdamW. Default 128.
	Rank int
	// UpdateGap is T, the updates between refreshes of the projections
	// (Refresh); the caller runs them. Default 200.
	UpdateGap int
	// Scale multiplies the projected-back update. Default 0.25.
	Scale float64
}

// DefaultGaLoreConfig returns AdamW's defaults with Rank 128, UpdateGap
// 200 and Scale 0.25, the paper's settings for its 60M-1B models.
func DefaultGaLoreConfig() GaLoreConfig {
	return GaLoreConfig{AdamW: DefaultAdamWConfig(), Rank: 128, UpdateGap: 200, Scale: 0.25}
}

func (c GaLoreConfig) validate() error {
	if err := c.AdamW.validate("galore"); err != nil {
		return err
	}
	if c.Rank < 1 {
		return fmt.Errorf("optim: galore: Rank = %d, want >= 1", c.Rank)
	}
	if c.UpdateGap < 1 {
		return fmt.Errorf("optim: galore: UpdateGap = %d, want >= 1", c.UpdateGap)
	}
	return checkPositive("galore", "Scale", c.Scale)
}

// GaLore is AdamW with gradient low-rank projection. For a hidden matrix
// (Param.Matrix) of shape [m, n] with min(m, n) >= Rank it keeps a
// projection P onto the smaller side, "<param>.galore_proj" ([m, r] when
// m <= n, else [n, r]), and Adam moments of the projected gradient
// ([r, n] or [m, r]); each update is
//
//	R = Pᵀ·G (or G·P),  m, v ← Adam moments of R
//	p ← p·(1 − lr·wd) − Scale · lr/(1−β1ᵗ) · P·(m / (√v/√(1−β2ᵗ) + ε))   (or (…)·Pᵀ)
//
// so the optimizer state of that matrix shrinks from 2mn to 2rn + mr
// floats (m <= n). Other parameters get AdamW.
//
// The projections are state arrays, inputs of the compiled step like the
// moments, so replacing them does not retrace it. Refresh recomputes them
// from a gradient by SVD, which MLX runs on the CPU only, so it runs
// outside the compiled step every UpdateGap updates. Until the first
// Refresh each projection is the first r columns of the identity.
type GaLore struct {
	cfg GaLoreConfig
	lay *layout
	// left[i] is true where P projects from the left (m <= n); proj[i]
	// says whether parameter i is projected at all.
	proj, left []bool
}

// NewGaLore returns GaLore over params.
func NewGaLore(params []Param, cfg GaLoreConfig) (*GaLore, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	o := &GaLore{cfg: cfg, proj: make([]bool, len(params)), left: make([]bool, len(params))}
	for i, p := range params {
		if p.Matrix && len(p.Shape) == 2 && min(p.Shape[0], p.Shape[1]) >= cfg.Rank {
			o.proj[i], o.left[i] = true, p.Shape[0] <= p.Shape[1]
		}
	}
	index := 0
	lay, err := newLayout("galore", params, func(p Param) []slot {
		i := index
		index++
		if !o.proj[i] {
			return adamSlots(p)
		}
		m, n, r := p.Shape[0], p.Shape[1], cfg.Rank
		if o.left[i] {
			return []slot{{"galore_proj", []int{m, r}}, {"adam_m", []int{r, n}}, {"adam_v", []int{r, n}}}
		}
		return []slot{{"galore_proj", []int{n, r}}, {"adam_m", []int{m, r}}, {"adam_v", []int{m, r}}}
	})
	if err != nil {
		return nil, err
	}
	o.lay = lay
	return o, nil
}

// Projected returns the names of the parameters GaLore projects.
func (o *GaLore) Projected() []string {
	var out []string
	for i, p := range o.lay.params {
		if o.proj[i] {
			out = append(out, p.Name)
		}
	}
	return out
}

// Name returns "galore".
func (o *GaLore) Name() string { return "galore" }

// Config returns the configuration, for the caller that runs Refresh every
// UpdateGap updates.
func (o *GaLore) Config() GaLoreConfig { return o.cfg }

// StateNames returns "step", then per parameter "<param>.galore_proj",
// "<param>.adam_m", "<param>.adam_v" where it is projected and
// "<param>.adam_m", "<param>.adam_v" elsewhere.
func (o *GaLore) StateNames() []string { return o.lay.stateNames() }

// Init returns zero moments and, as projections, the first r columns of
// the identity.
func (o *GaLore) Init() ([]*mlx.Array, error) {
	state, err := o.lay.init()
	if err != nil {
		return nil, err
	}
	for i := range o.lay.params {
		if !o.proj[i] {
			continue
		}
		j := o.lay.first[i]
		d, r := o.lay.shapes[j][0], o.lay.shapes[j][1]
		eye := make([]float32, d*r)
		for k := range r {
			eye[k*r+k] = 1
		}
		state[j].Free()
		state[j] = mlx.FromSlice(eye, d, r)
		if err := state[j].Err(); err != nil {
			mlx.Free(state...)
			return nil, fmt.Errorf("optim: galore: init %s: %w", o.lay.names[j], err)
		}
	}
	return state, nil
}

// Update applies one GaLore update (see GaLore).
func (o *GaLore) Update(params, grads, state []*mlx.Array, lr *mlx.Array) ([]*mlx.Array, []*mlx.Array, error) {
	return runUpdate(o.lay, params, grads, state, lr, func(s step, newParams, newState []*mlx.Array) {
		k := newAdamCoefs(o.cfg.AdamW, s.lr, s.t)
		for i, p := range o.lay.params {
			sl := o.lay.slots(state, i)
			j := o.lay.first[i]
			if !o.proj[i] {
				np, m, v := k.apply(params[i], grads[i], sl[0], sl[1], p.Decay)
				newParams[i] = np
				newState[j], newState[j+1] = m, v
				continue
			}
			newParams[i], newState[j+1], newState[j+2] = o.projected(k, params[i], grads[i], sl[0], sl[1], sl[2], p.Decay, o.left[i])
			// The projection passes through unchanged, as a handle of its
			// own (Update's outputs are new arrays; copying shares the buffer).
			newState[j] = mlx.Copy(sl[0])
		}
	})
}

// projected is the update of one projected matrix.
func (o *GaLore) projected(k adamCoefs, p, g, proj, m, v *mlx.Array, decay, left bool) (newP, newM, newV *mlx.Array) {
	g32 := f32(g)
	var r *mlx.Array
	if left {
		r = mlx.Matmul(mlx.Transpose(proj), g32)
	} else {
		r = mlx.Matmul(g32, proj)
	}
	newM = ema(m, r, k.cfg.Beta1)
	newV = ema(v, mlx.Square(r), k.cfg.Beta2)
	denom := mlx.AddScalar(mlx.Divide(mlx.Sqrt(newV), k.sqrtBC2), k.cfg.Eps)
	n := mlx.Divide(newM, denom)
	var back *mlx.Array
	if left {
		back = mlx.Matmul(proj, n)
	} else {
		back = mlx.Matmul(n, mlx.Transpose(proj))
	}
	p32 := f32(p)
	if decay && k.cfg.WeightDecay != 0 {
		p32 = mlx.Multiply(p32, k.decay)
	}
	upd := mlx.Multiply(mlx.MulScalar(k.stepSize, o.cfg.Scale), back)
	return castTo(mlx.Subtract(p32, upd), p.Dtype()), newM, newV
}

// Refresh returns state with every projection recomputed from grads, a
// gradient of the parameters (one batch's is what the paper uses): the
// top-r left singular vectors of G where m <= n, else the top-r right
// ones. The moments are kept, as the paper does. It computes the SVDs on
// the CPU and must run outside a compiled step; it returns new arrays for
// the projections only, and the caller frees the replaced ones
// (Replaced).
func (o *GaLore) Refresh(grads, state []*mlx.Array) ([]*mlx.Array, error) {
	if len(grads) != len(o.lay.params) || len(state) != len(o.lay.names) {
		return nil, fmt.Errorf("optim: galore: refresh got %d grads and %d state arrays, want %d and %d",
			len(grads), len(state), len(o.lay.params), len(o.lay.names))
	}
	out := append([]*mlx.Array(nil), state...)
	err := mlx.Do(func() error {
		scope := mlx.NewScope()
		defer scope.Close()
		var fresh []*mlx.Array
		for i := range o.lay.params {
			if !o.proj[i] {
				continue
			}
			j := o.lay.first[i]
			r := o.cfg.Rank
			u, _, vt := mlx.SVD(f32(grads[i]))
			var p *mlx.Array
			if o.left[i] {
				p = mlx.Slice(u, []int{0, 0}, []int{u.Shape()[0], r})
			} else {
				p = mlx.Transpose(mlx.Slice(vt, []int{0, 0}, []int{r, vt.Shape()[1]}))
			}
			// An array of its own (a slice would keep the whole SVD
			// factor alive), made on the default device.
			p = mlx.MulScalar(p, 1)
			if err := mlx.Eval(p); err != nil {
				return fmt.Errorf("optim: galore: refresh %s: %w", o.lay.names[j], err)
			}
			out[j] = p
			fresh = append(fresh, p)
		}
		scope.Keep(fresh...)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Replaced returns the arrays of old that Refresh replaced in updated, so
// the caller can free them.
func (o *GaLore) Replaced(old, updated []*mlx.Array) []*mlx.Array {
	var out []*mlx.Array
	for j := range old {
		if j < len(updated) && old[j] != updated[j] {
			out = append(out, old[j])
		}
	}
	return out
}
