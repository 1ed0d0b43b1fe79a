package optim

import (
	"slices"
	"strings"
	"testing"

	"github.com/posttrainllm/posttrainllm/mlx"
)

// viaFlat runs an elementwise optimizer over its flat layout (Pack,
// the groups' update, Unpack) behind the per-parameter Optimizer
// interface, so the reference tests can check it.
type viaFlat struct {
	Optimizer
	flat *Flat
}

func newViaFlat(t *testing.T, opt Optimizer) viaFlat {
	t.Helper()
	dtypes := make([]mlx.Dtype, len(fixtureParams()))
	for i := range dtypes {
		dtypes[i] = mlx.Float32
	}
	f, err := NewFlat(opt, dtypes)
	if err != nil || f == nil {
		t.Fatalf("NewFlat(%s) = %v, %v; want a layout", opt.Name(), f, err)
	}
	return viaFlat{Optimizer: opt, flat: f}
}

func (v viaFlat) Update(params, grads, state []*mlx.Array, lr *mlx.Array) ([]*mlx.Array, []*mlx.Array, error) {
	p, s := v.flat.Pack(params), v.flat.PackState(state)
	np, ns, err := v.flat.Optimizer().Update(p, v.flat.Pack(grads), s, lr)
	if err != nil {
		return nil, nil, err
	}
	return v.flat.Unpack(np), v.flat.UnpackState(ns), nil
}

// AdamW, Lion and SGD over flat groups compute the float64 reference of
// each parameter, and hand back per-parameter state under the same names.
func TestFlatMatchesReference(t *testing.T) {
	adam := DefaultAdamWConfig()
	adam.WeightDecay = 0.5
	opt, err := NewAdamW(fixtureParams(), adam)
	if err != nil {
		t.Fatal(err)
	}
	checkAgainstReference(t, newViaFlat(t, opt), fixtureParams(), func(step int, lr float64, params []Param, p, g [][]float64, st map[string][]float64) {
		for i, prm := range params {
			refAdamW(adam, step, lr, prm.Name, prm.Decay, p[i], g[i], st)
		}
	})
	lion, err := NewLion(fixtureParams(), DefaultLionConfig())
	if err != nil {
		t.Fatal(err)
	}
	checkAgainstReference(t, newViaFlat(t, lion), fixtureParams(), refLion(t, DefaultLionConfig()))
	sgd := SGDConfig{Momentum: 0.9, Nesterov: true, WeightDecay: 0.5}
	opt2, err := NewSGD(fixtureParams(), sgd)
	if err != nil {
		t.Fatal(err)
	}
	checkAgainstReference(t, newViaFlat(t, opt2), fixtureParams(), refSGD(sgd))
}

// Parameters are grouped by dtype and decay flag, in parameter order, and
// Pack and Unpack (and their state versions) are inverses.
func TestFlatGroupsAndRoundTrip(t *testing.T) {
	params := fixtureParams() // decay: w yes, v no, e yes, b no
	opt, err := NewAdamW(params, DefaultAdamWConfig())
	if err != nil {
		t.Fatal(err)
	}
	dtypes := []mlx.Dtype{mlx.Float32, mlx.Float32, mlx.BFloat16, mlx.Float32}
	f, err := NewFlat(opt, dtypes)
	if err != nil {
		t.Fatal(err)
	}
	// (float32, decay) = w; (float32, no decay) = v, b; (bf16, decay) = e.
	if got, want := []int{f.GroupOf(0), f.GroupOf(1), f.GroupOf(2), f.GroupOf(3)}, []int{0, 1, 2, 1}; f.Groups() != 3 || !slices.Equal(got, want) {
		t.Fatalf("%d groups, parameters in groups %v, want 3 and %v", f.Groups(), got, want)
	}
	onMLX(t, func() {
		arrays := paramArrays(t, params, mlx.Float32)
		arrays[2] = mlx.AsType(arrays[2], mlx.BFloat16)
		groups := f.Pack(arrays)
		if len(groups) != 3 || groups[2].Dtype() != mlx.BFloat16 ||
			groups[0].Dim(0) != 6 || groups[1].Dim(0) != 11 || groups[2].Dim(0) != 6 {
			t.Fatalf("packed into %d groups (%v), want sizes 6, 11, 6", len(groups), groups)
		}
		back := f.Unpack(groups)
		for i := range arrays {
			assertClose(t, "unpacked "+params[i].Name, readData(t, back[i]), readData(t, arrays[i]), 0)
			if !slices.Equal(back[i].Shape(), params[i].Shape) {
				t.Fatalf("unpacked %s has shape %v, want %v", params[i].Name, back[i].Shape(), params[i].Shape)
			}
		}
		state, err := opt.Init()
		if err != nil {
			t.Fatal(err)
		}
		for j := 1; j < len(state); j++ {
			state[j] = mlx.AddScalar(state[j], float64(j))
		}
		packed := f.PackState(state)
		if want := 1 + 3*2; len(packed) != want || packed[0] != state[0] {
			t.Fatalf("packed state has %d arrays, want %d with the same counter", len(packed), want)
		}
		unpacked := f.UnpackState(packed)
		for j := 1; j < len(state); j++ {
			assertClose(t, "unpacked state "+opt.StateNames()[j], readData(t, unpacked[j]), readData(t, state[j]), 0)
		}
	})
}

// Optimizers that read whole matrices have no flat layout; a layout is
// refused when the dtypes do not match the parameters.
func TestFlatOnlyForElementwise(t *testing.T) {
	for _, name := range []string{"adafactor", "muon", "galore", "sophia"} {
		opt, err := New(name, fixtureParams(), DefaultConfig())
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := opt.(Elementwise); ok {
			t.Errorf("%s is Elementwise; it reads whole matrices", name)
		}
		if f, err := NewFlat(opt, make([]mlx.Dtype, 4)); f != nil || err != nil {
			t.Errorf("NewFlat(%s) = %v, %v; want nil, nil", name, f, err)
		}
	}
	opt, err := NewAdamW(fixtureParams(), DefaultAdamWConfig())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewFlat(opt, []mlx.Dtype{mlx.Float32}); err == nil || !strings.Contains(err.Error(), "4 params with 1 dtypes") {
		t.Errorf("NewFlat with one dtype for four params: %v", err)
	}
}

// A run of consecutive parameters contiguous in one group, with equal
// trailing dimensions, is one unit whose view is the parameters stacked;
// runs split across groups, or of other trailing shapes, stay apart.
func TestFlatUnitsStackRuns(t *testing.T) {
	params := []Param{
		{Name: "a", Shape: []int{2, 3}, Decay: true},
		{Name: "b", Shape: []int{1, 3}, Decay: true},
		{Name: "n", Shape: []int{3}},
		{Name: "c", Shape: []int{2, 2}, Decay: true},
		{Name: "d", Shape: []int{2, 2}, Decay: true},
	}
	opt, err := NewAdamW(params, DefaultAdamWConfig())
	if err != nil {
		t.Fatal(err)
	}
	f, err := NewFlat(opt, []mlx.Dtype{mlx.Float32, mlx.Float32, mlx.Float32, mlx.Float32, mlx.Float32})
	if err != nil {
		t.Fatal(err)
	}
	// [0 1] and [3 4] stack; [2 3] crosses from the no-decay group.
	units := f.Units([][]int{{0, 1}, {2, 3}, {3, 4}})
	want := [][]int{{0, 1}, {3, 4}, {2}}
	if !slices.EqualFunc(units, want, slices.Equal) {
		t.Fatalf("units %v, want %v", units, want)
	}
	if got := f.Units([][]int{{3, 1}}); !slices.EqualFunc(got, [][]int{{0}, {1}, {3}, {4}, {2}}, slices.Equal) {
		t.Fatalf("a run out of order: units %v, want every parameter apart", got)
	}
	onMLX(t, func() {
		arrays := paramArrays(t, params, mlx.Float32)
		views := f.Views(f.Pack(arrays), units)
		stacked := mlx.Concatenate([]*mlx.Array{arrays[0], arrays[1]}, 0)
		if !slices.Equal(views[0].Shape(), []int{3, 3}) {
			t.Fatalf("stacked view has shape %v, want [3 3]", views[0].Shape())
		}
		assertClose(t, "stacked view", readData(t, views[0]), readData(t, stacked), 0)
		assertClose(t, "single view", readData(t, views[2]), readData(t, arrays[2]), 0)
	})
}
