package optim

import (
	"fmt"
	"slices"
	"strings"

	"github.com/posttrainllm/posttrainllm/mlx"
)

// Elementwise is an Optimizer whose update of each parameter element reads
// only that element's parameter, gradient and state, the parameter's Decay
// flag and the step's shared scalars (learning rate, update counter). Such
// an update gives the same numbers on parameters concatenated into one
// flat array as on each parameter alone, so Flat can run it as one update
// per group of parameters. AdamW, Lion and SGD are elementwise; Adafactor,
// Muon, GaLore and Sophia, which read whole matrices, are not.
type Elementwise interface {
	Optimizer
	// Params returns the parameters the optimizer was built for.
	Params() []Param
	// Over returns the same optimizer, with the same configuration, over
	// other parameters.
	Over(params []Param) (Optimizer, error)
}

// Flat is the flat layout of an elementwise optimizer's parameters and
// state: the parameters grouped by dtype and Decay flag, each group
// concatenated, in parameter order, into one 1-D array, and the optimizer
// run over the groups. Every slot of the optimizer's state (AdamW's two
// moments) is laid out the same way.
//
// Why: on a GPU each array of the update costs a kernel launch and host
// work per step. Over flat groups, AdamW is one fused kernel per group
// instead of one per parameter, and the gradient norm reads one array
// (docs/performance/gpu.md). The per-parameter arrays stay what callers
// see: Unpack and UnpackState return them as views of the groups, in the
// optimizer's parameter and StateNames order, for checkpoints and
// evaluation.
type Flat struct {
	params []Param // the per-parameter list, in the optimizer's order
	dtypes []mlx.Dtype
	groups []flatGroup
	// at[i] is parameter i's group and its offset there.
	at    []flatPos
	slots int // state arrays per parameter after the step counter
	inner Optimizer
}

// flatPos is where a parameter lies: its group and its offset there.
type flatPos struct{ group, offset int }

// flatGroup is one flat array: the parameters (indices into Flat.params)
// it holds, each one's offset, and its total size.
type flatGroup struct {
	members []int
	offsets []int
	size    int
	dtype   mlx.Dtype
	decay   bool
}

// NewFlat lays out opt's parameters, whose arrays have dtypes (one per
// parameter, in order), as flat groups. It returns nil and no error when
// opt is not Elementwise: such an optimizer runs per parameter.
func NewFlat(opt Optimizer, dtypes []mlx.Dtype) (*Flat, error) {
	e, ok := opt.(Elementwise)
	if !ok {
		return nil, nil
	}
	params := e.Params()
	if len(dtypes) != len(params) {
		return nil, fmt.Errorf("optim: %s: flat layout of %d params with %d dtypes", opt.Name(), len(params), len(dtypes))
	}
	names := opt.StateNames()
	f := &Flat{params: params, dtypes: slices.Clone(dtypes)}
	if len(params) > 0 {
		f.slots = (len(names) - 1) / len(params)
	}
	// The state must be the counter, then f.slots arrays of each
	// parameter's shape per parameter, in parameter order.
	if len(names) != 1+f.slots*len(params) {
		return nil, fmt.Errorf("optim: %s: %d state arrays for %d params, not a counter and equal slots per param", opt.Name(), len(names), len(params))
	}
	for i, p := range params {
		for k := 0; k < f.slots; k++ {
			if n := names[1+i*f.slots+k]; !strings.HasPrefix(n, p.Name+".") {
				return nil, fmt.Errorf("optim: %s: state %q is not a slot of param %q", opt.Name(), n, p.Name)
			}
		}
	}
	index := map[[2]int]int{} // (dtype, decay) → group
	for i, p := range params {
		decay := 0
		if p.Decay {
			decay = 1
		}
		key := [2]int{int(dtypes[i]), decay}
		g, seen := index[key]
		if !seen {
			g = len(f.groups)
			index[key] = g
			f.groups = append(f.groups, flatGroup{dtype: dtypes[i], decay: p.Decay})
		}
		grp := &f.groups[g]
		grp.members = append(grp.members, i)
		grp.offsets = append(grp.offsets, grp.size)
		grp.size += p.size()
	}
	groupParams := make([]Param, len(f.groups))
	f.at = make([]flatPos, len(params))
	for g, grp := range f.groups {
		for k, i := range grp.members {
			f.at[i] = flatPos{g, grp.offsets[k]}
		}
		groupParams[g] = Param{Name: fmt.Sprintf("flat.%d", g), Shape: []int{grp.size}, Decay: grp.decay}
	}
	inner, err := e.Over(groupParams)
	if err != nil {
		return nil, fmt.Errorf("optim: %s: flat layout: %w", opt.Name(), err)
	}
	f.inner = inner
	return f, nil
}

// size is the number of elements of p.
func (p Param) size() int {
	n := 1
	for _, d := range p.Shape {
		n *= d
	}
	return n
}

// Optimizer returns the optimizer over the groups: its Update takes the
// flat parameters, gradients and state (PackState's order).
func (f *Flat) Optimizer() Optimizer { return f.inner }

// GroupOf returns the group that holds parameter i.
func (f *Flat) GroupOf(i int) int { return f.at[i].group }

// Groups returns the number of flat arrays.
func (f *Flat) Groups() int { return len(f.groups) }

// Dtypes returns the parameter dtypes the layout was built for.
func (f *Flat) Dtypes() []mlx.Dtype { return slices.Clone(f.dtypes) }

// Pack concatenates per-parameter arrays (one per parameter, in order,
// each of its parameter's shape) into the groups' flat arrays. The
// caller owns the result.
func (f *Flat) Pack(arrays []*mlx.Array) []*mlx.Array {
	out := make([]*mlx.Array, len(f.groups))
	for g, grp := range f.groups {
		parts := make([]*mlx.Array, len(grp.members))
		for k, i := range grp.members {
			parts[k] = mlx.Reshape(arrays[i], -1)
		}
		if len(parts) == 1 {
			out[g] = parts[0]
			continue
		}
		out[g] = mlx.Concatenate(parts, 0)
		mlx.Free(parts...)
	}
	return out
}

// Unpack returns each parameter's array as a view of the groups' flat
// arrays (Pack's inverse), in parameter order. The views need no copy;
// the caller owns them, and they keep the groups' memory alive.
func (f *Flat) Unpack(groups []*mlx.Array) []*mlx.Array {
	units := make([][]int, len(f.params))
	for i := range units {
		units[i] = []int{i}
	}
	return f.Views(groups, units)
}

// Units groups the parameters into the arrays a step differentiates,
// in group order: each run of stacked (consecutive parameter indices
// whose arrays stack along axis 0, such as a layer's q, k and v weights:
// wq, wk, wv) that lies contiguous in one group and shares its trailing
// dimensions becomes one unit; every other parameter is a unit of its
// own. Concatenating the units' flattened gradients in this order gives
// the layout's flat gradient (the Order concatenation).
func (f *Flat) Units(stacked [][]int) [][]int {
	run := map[int][]int{} // first index → run
	for _, r := range stacked {
		if len(r) > 1 {
			run[r[0]] = r
		}
	}
	var units [][]int
	for _, grp := range f.groups {
		for k := 0; k < len(grp.members); k++ {
			i := grp.members[k]
			if r := run[i]; r != nil && f.stackable(grp, k, r) {
				units = append(units, slices.Clone(r))
				k += len(r) - 1
				continue
			}
			units = append(units, []int{i})
		}
	}
	return units
}

// stackable reports whether run r starts at member k of grp, continues
// with the next members in order, and shares its trailing dimensions.
func (f *Flat) stackable(grp flatGroup, k int, r []int) bool {
	if k+len(r) > len(grp.members) {
		return false
	}
	first := f.params[r[0]].Shape
	for j, i := range r {
		s := f.params[i].Shape
		if grp.members[k+j] != i || len(s) < 1 || !slices.Equal(s[1:], first[1:]) {
			return false
		}
	}
	return true
}

// Views returns a view of the groups for each unit (Units): a
// parameter's array, or a run's parameters stacked along axis 0. The
// caller owns them; they need no copy.
func (f *Flat) Views(groups []*mlx.Array, units [][]int) []*mlx.Array {
	out := make([]*mlx.Array, len(units))
	for u, unit := range units {
		g, off := f.at[unit[0]].group, f.at[unit[0]].offset
		shape := slices.Clone(f.params[unit[0]].Shape)
		size := 0
		for j, i := range unit {
			size += f.params[i].size()
			if j > 0 {
				shape[0] += f.params[i].Shape[0]
			}
		}
		part := mlx.Slice(groups[g], []int{off}, []int{off + size})
		out[u] = mlx.Reshape(part, shape...)
		mlx.Free(part)
	}
	return out
}

// PackState packs per-parameter optimizer state (the optimizer's
// StateNames order) into the flat optimizer's: the counter, then each
// group's slots. The counter is the same array, not a copy.
func (f *Flat) PackState(state []*mlx.Array) []*mlx.Array {
	out := []*mlx.Array{state[0]}
	for _, grp := range f.groups {
		for k := 0; k < f.slots; k++ {
			parts := make([]*mlx.Array, len(grp.members))
			for m, i := range grp.members {
				parts[m] = mlx.Reshape(state[1+i*f.slots+k], -1)
			}
			if len(parts) == 1 {
				out = append(out, parts[0])
				continue
			}
			out = append(out, mlx.Concatenate(parts, 0))
			mlx.Free(parts...)
		}
	}
	return out
}

// UnpackState returns the flat optimizer's state as per-parameter views,
// in the optimizer's StateNames order (PackState's inverse). The counter
// is the same array.
func (f *Flat) UnpackState(state []*mlx.Array) []*mlx.Array {
	out := make([]*mlx.Array, 1+f.slots*len(f.params))
	out[0] = state[0]
	for g, grp := range f.groups {
		for k := 0; k < f.slots; k++ {
			flat := state[1+g*f.slots+k]
			for m, i := range grp.members {
				off := grp.offsets[m]
				part := mlx.Slice(flat, []int{off}, []int{off + f.params[i].size()})
				out[1+i*f.slots+k] = mlx.Reshape(part, f.params[i].Shape...)
				mlx.Free(part)
			}
		}
	}
	return out
}

var (
	_ Elementwise = (*AdamW)(nil)
	_ Elementwise = (*Lion)(nil)
	_ Elementwise = (*SGD)(nil)
)
