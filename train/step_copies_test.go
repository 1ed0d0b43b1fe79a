package train

import (
	"fmt"
	"math"
	"testing"

	"github.com/posttrainllm/posttrainllm/internal/mlxtest"
	"github.com/posttrainllm/posttrainllm/internal/runtest/fixture"
	"github.com/posttrainllm/posttrainllm/mlx"
	"github.com/posttrainllm/posttrainllm/model"
	"github.com/posttrainllm/posttrainllm/optim"
	"github.com/posttrainllm/posttrainllm/step"
)

const copiesAccum, copiesB, copiesT, copiesSeed = 2, 4, 16, 5

// mixedModel is a tiny model computing in bfloat16 on float32 masters.
func mixedModel(t testing.TB) *model.Transformer {
	t.Helper()
	m, err := model.New(model.Config{VocabSize: 256, DModel: 32, Layers: 2, Heads: 2, Context: copiesT,
		Dtype: "bfloat16", MasterFP32: true})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// copiesBatch returns step i's [accum, B, T] inputs and targets.
func copiesBatch(ds *testData, i int) step.Batch {
	n := copiesAccum * copiesB
	b := step.Batch{X: make([]int32, n*copiesT), Y: make([]int32, n*copiesT), N: copiesAccum, B: copiesB, T: copiesT}
	for r := 0; r < n; r++ {
		off := (i*n + r) * 53 % (ds.Train.Len() - copiesT - 1)
		ds.Train.CopyInto(b.X[r*copiesT:(r+1)*copiesT], off)
		ds.Train.CopyInto(b.Y[r*copiesT:(r+1)*copiesT], off+1)
	}
	return b
}

// copiesRun is a State of an AdamW step over a mixed-precision model,
// with a loss that records the dtype of the parameters it was last called
// with.
type copiesRun struct {
	t      testing.TB
	upd    *step.Step
	opt    optim.Optimizer
	state  *step.State
	ds     *testData
	seen   mlx.Dtype
	losses []float64
}

func newCopiesRun(t testing.TB, m *model.Transformer, opts step.StepOptions) *copiesRun {
	t.Helper()
	opt, err := optim.New("adamw", OptimizerParams(m.Specs), optim.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	r := &copiesRun{t: t, opt: opt, ds: memoryDataset(t, fixture.SyntheticText(20_000), copiesT)}
	loss := func(p []*mlx.Array, x, y *mlx.Array) *mlx.Array {
		r.seen = p[0].Dtype()
		return m.Loss(p, x, y)
	}
	opts.Accum, opts.GradClip = copiesAccum, 1
	if r.upd, err = step.NewStep(step.MeanLoss(loss), opt, step.Layout{Trainable: len(m.Specs), State: len(opt.StateNames())}, opts); err != nil {
		t.Fatal(err)
	}
	if r.state, err = step.InitState(r.upd, m, copiesSeed); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		r.state.Free()
		r.upd.Free()
	})
	return r
}

// run applies n updates with data steps first..first+n-1 and waits for
// the last one to finish.
func (r *copiesRun) run(first, n int) {
	r.t.Helper()
	for i := first; i < first+n; i++ {
		loss, err := r.state.Update(1e-2, copiesBatch(r.ds, i))
		if err != nil {
			r.t.Fatal(err)
		}
		r.losses = append(r.losses, loss)
	}
	if err := r.state.Eval(); err != nil {
		r.t.Fatal(err)
	}
}

// assertSame fails unless a and b agree within 1e-6 relative, element by
// element, and reports whether they are bit-identical.
func assertSame(t testing.TB, what string, a, b []*mlx.Array) (identical bool) {
	t.Helper()
	return assertWithin(t, what, a, b, 1e-6, 0)
}

// assertWithin is assertSame with a tolerance of rel relative plus abs.
func assertWithin(t testing.TB, what string, a, b []*mlx.Array, rel, abs float64) (identical bool) {
	t.Helper()
	identical = true
	for i := range a {
		av, bv := bothFloat32s(t, a[i], b[i])
		for j := range av {
			if av[j] != bv[j] {
				identical = false
			}
			if d := math.Abs(float64(av[j] - bv[j])); d > rel*math.Abs(float64(av[j]))+abs {
				t.Fatalf("%s: parameter %d element %d: %g vs %g", what, i, j, av[j], bv[j])
			}
		}
	}
	return identical
}

// assertNear fails unless every element of a is within rel of the largest
// magnitude of its array in b: the tolerance for state such as AdamW's
// moments, where an element near zero is a difference of larger terms and
// carries their rounding, not its own.
func assertNear(t testing.TB, what string, a, b []*mlx.Array, rel float64) {
	t.Helper()
	for i := range a {
		av, bv := bothFloat32s(t, a[i], b[i])
		tol := rel * maxAbs(bv)
		for j := range av {
			if d := math.Abs(float64(av[j] - bv[j])); d > tol {
				t.Fatalf("%s: array %d element %d: %g vs %g (tolerance %g)", what, i, j, av[j], bv[j], tol)
			}
		}
	}
}

// bothFloat32s reads a and b as float32s.
func bothFloat32s(t testing.TB, a, b *mlx.Array) (av, bv []float32) {
	t.Helper()
	av, err := a.Float32s()
	if err != nil {
		t.Fatal(err)
	}
	bv, err = b.Float32s()
	if err != nil {
		t.Fatal(err)
	}
	return av, bv
}

func maxAbs(v []float32) float64 {
	var m float64
	for _, x := range v {
		m = math.Max(m, math.Abs(float64(x)))
	}
	return m
}

func assertSameLosses(t testing.TB, what string, a, b []float64) {
	t.Helper()
	if len(a) != len(b) {
		t.Fatalf("%s: %d losses vs %d", what, len(a), len(b))
	}
	for i := range a {
		if math.Abs(a[i]-b[i]) > 1e-6*math.Abs(a[i]) {
			t.Fatalf("%s: step %d loss %.9g vs %.9g", what, i, a[i], b[i])
		}
	}
}

// Differentiating with respect to bfloat16 copies carried by the state
// gives the updates of a loss that casts the float32 masters itself,
// compiled and interpreted.
func TestComputeCopiesMatchMasterCasts(t *testing.T) {
	const steps = 6
	for _, compile := range []bool{true, false} {
		t.Run(fmt.Sprintf("compile=%v", compile), func(t *testing.T) {
			mlxtest.Run(t, func(t testing.TB) {
				m := mixedModel(t)
				base := newCopiesRun(t, m, step.StepOptions{Compile: compile})
				base.run(0, steps)
				if base.seen != mlx.Float32 {
					t.Fatalf("without copies the loss saw %v parameters, want the float32 masters", base.seen)
				}
				cp := newCopiesRun(t, m, step.StepOptions{Compile: compile, ComputeCopies: true, ComputeDtype: mlx.BFloat16})
				cp.run(0, steps)
				if cp.seen != mlx.BFloat16 {
					t.Fatalf("with copies the loss saw %v parameters, want bfloat16", cp.seen)
				}
				got := cp.state.Params()
				for i, c := range cp.state.Copies() {
					if c.Dtype() != mlx.BFloat16 || got[i].Dtype() != mlx.Float32 {
						t.Fatalf("param %d: copy %v, master %v; want bfloat16 and float32", i, c.Dtype(), got[i].Dtype())
					}
				}
				initial, err := m.Init(copiesSeed)
				if err != nil {
					t.Fatal(err)
				}
				defer mlx.Free(initial...)
				if d, _ := mlx.Subtract(got[2], initial[2]).Float32s(); maxAbs(d) == 0 {
					t.Fatal("the parameters did not move; the comparison tells nothing")
				}
				assertSameLosses(t, "with vs without copies", base.losses, cp.losses)
				identical := assertSame(t, "with vs without copies", base.state.Params(), got)
				t.Logf("%d steps: bit-identical params: %v", steps, identical)
				if want := map[bool]int{true: 1, false: steps}[compile]; cp.upd.Traces() != want {
					t.Fatalf("step body ran %d times, want %d", cp.upd.Traces(), want)
				}
			})
		})
	}
}

// The state feeds each update the copies the previous one emitted and
// releases the copies it replaces; the step traces once. Step.Run alone,
// which casts the parameters itself, gives the same update without
// tracing again.
func TestComputeCopiesCarriedByState(t *testing.T) {
	mlxtest.Run(t, func(t testing.TB) {
		const steps = 10
		m := mixedModel(t)
		ref := newCopiesRun(t, m, step.StepOptions{Compile: true})
		ref.run(0, steps)

		cp := newCopiesRun(t, m, step.StepOptions{Compile: true, ComputeCopies: true, ComputeDtype: mlx.BFloat16})
		for i := 0; i < steps; i++ {
			prev := cp.state.Copies()
			cp.run(i, 1)
			for j, c := range prev {
				if c.Valid() {
					t.Fatalf("update %d: the previous copy of param %d is still live", i, j)
				}
			}
		}
		if cp.upd.Traces() != 1 {
			t.Fatalf("traced %d times over %d updates, want 1", cp.upd.Traces(), steps)
		}
		assertSameLosses(t, "carried copies", ref.losses, cp.losses)
		assertSame(t, "carried copies", ref.state.Params(), cp.state.Params())

		// One update through Step.Run from fresh parameters and state.
		params, err := m.Init(copiesSeed)
		if err != nil {
			t.Fatal(err)
		}
		defer mlx.Free(params...)
		opt, err := cp.opt.Init()
		if err != nil {
			t.Fatal(err)
		}
		defer mlx.Free(opt...)
		b := copiesBatch(cp.ds, 0)
		lr := mlx.Scalar(1e-2, mlx.Float32)
		res, err := cp.upd.Run(params, opt, lr, mlx.FromSlice(b.X, b.N, b.B, b.T), mlx.FromSlice(b.Y, b.N, b.B, b.T))
		if err != nil {
			t.Fatal(err)
		}
		defer mlx.Free(append(append(res.Params, res.State...), res.Loss, res.GradNorm)...)
		loss, err := res.Loss.Item()
		if err != nil {
			t.Fatal(err)
		}
		assertSameLosses(t, "Step.Run casting its own copies", ref.losses[:1], []float64{loss})
		if cp.upd.Traces() != 1 {
			t.Fatalf("Step.Run traced the step again (%d traces)", cp.upd.Traces())
		}
	})
}

// Many updates keep MLX's active memory flat: each update frees the
// copies it replaces.
func TestComputeCopiesMemoryIsFlat(t *testing.T) {
	mlxtest.Run(t, func(t testing.TB) {
		const warm, steps = 10, 200
		cp := newCopiesRun(t, mixedModel(t), step.StepOptions{Compile: true, ComputeCopies: true, ComputeDtype: mlx.BFloat16})
		cp.run(0, warm)
		atWarm := mlx.Memory().Active
		cp.run(warm, steps-warm)
		after := mlx.Memory().Active
		// One leaked copy of the smallest parameter (a norm, 32 bfloat16) per
		// step would add 64 B × 190.
		const slack = 1 << 10
		if after > atWarm+slack {
			t.Fatalf("active memory %d B after %d steps, %d B after %d: the copies leak", after, steps, atWarm, warm)
		}
		t.Logf("active memory %d B after %d steps, %d B after %d", after, steps, atWarm, warm)
	})
}

// Free releases the copies with the rest of the state.
func TestComputeCopiesFreedWithState(t *testing.T) {
	mlxtest.Run(t, func(t testing.TB) {
		m := mixedModel(t)
		for _, compile := range []bool{true, false} {
			cp := newCopiesRun(t, m, step.StepOptions{Compile: compile, ComputeCopies: true, ComputeDtype: mlx.BFloat16})
			cp.run(0, 2)
			copies, params := cp.state.Copies(), cp.state.Params()
			// One copy per array of the step's layout: per parameter, or
			// per flat group.
			want := len(params)
			if g := cp.upd.FlatGroups(); g > 0 {
				want = g
			}
			if len(copies) != want || want == 0 {
				t.Fatalf("compile=%v: state holds %d copies, want %d (> 0)", compile, len(copies), want)
			}
			var bytes uint64
			for _, a := range append(append([]*mlx.Array{}, copies...), params...) {
				bytes += uint64(a.Nbytes())
			}
			before := mlx.Memory().Active
			cp.state.Free()
			after := mlx.Memory().Active
			for i, a := range append(append([]*mlx.Array{}, copies...), params...) {
				if a.Valid() {
					t.Fatalf("compile=%v: copy or parameter %d still live after Free", compile, i)
				}
			}
			if before < after+bytes {
				t.Fatalf("compile=%v: Free released %d B of active memory, the parameters and copies hold %d B",
					compile, int64(before)-int64(after), bytes)
			}
			if _, err := cp.state.Update(1e-2, copiesBatch(cp.ds, 2)); err == nil {
				t.Fatalf("compile=%v: a freed state updated", compile)
			}
		}
	})
}

// Copies of parameters already in the compute dtype are the parameters
// themselves: the option is harmless there and changes no numbers.
func TestComputeCopiesOfSameDtype(t *testing.T) {
	mlxtest.Run(t, testComputeCopiesOfSameDtype)
}

func testComputeCopiesOfSameDtype(t testing.TB) {
	m, params, xs, ys := stepSetup(t)
	defer mlx.Free(params...)
	var deltas [2][]float32
	for i, on := range []bool{false, true} {
		opt := plainSGD(t, m)
		state, _ := opt.Init()
		opts := step.StepOptions{Accum: 1, Compile: true}
		if on {
			opts.ComputeCopies, opts.ComputeDtype = true, mlx.Float32
		}
		s, err := step.NewStep(step.MeanLoss(m.Loss), opt, step.Layout{Trainable: len(params), State: len(state)}, opts)
		if err != nil {
			t.Fatal(err)
		}
		res, err := s.Run(params, state, mlx.Scalar(1, mlx.Float32), mlx.FromSlice(xs, 1, 16, 16), mlx.FromSlice(ys, 1, 16, 16))
		if err != nil {
			t.Fatal(err)
		}
		deltas[i], _ = mlx.Subtract(res.Params[2], params[2]).Float32s()
		mlx.Free(res.Params...)
		mlx.Free(res.State...)
		s.Free()
	}
	for j := range deltas[0] {
		if deltas[0][j] != deltas[1][j] {
			t.Fatalf("element %d: update %g without copies, %g with float32 copies", j, deltas[0][j], deltas[1][j])
		}
	}
}

func TestComputeCopiesOptions(t *testing.T) {
	mlxtest.Run(t, testComputeCopiesOptions)
}

func testComputeCopiesOptions(t testing.TB) {
	m, params, _, _ := stepSetup(t)
	defer mlx.Free(params...)
	opt := plainSGD(t, m)
	for _, o := range []step.StepOptions{
		{Accum: 1, ComputeCopies: true},                          // bool is not a compute dtype
		{Accum: 1, ComputeCopies: true, ComputeDtype: mlx.Int32}, // nor is int32
		{Accum: 1, ComputeDtype: mlx.BFloat16},                   // dtype without the switch
	} {
		if s, err := step.NewStep(step.MeanLoss(m.Loss), opt, step.Layout{Trainable: len(params), State: 0}, o); err == nil {
			s.Free()
			t.Errorf("NewStep accepted %+v", o)
		}
	}
	cfg := tinyConfig()
	for _, c := range []struct {
		dtype  string
		master bool
		want   bool
	}{{"bfloat16", true, true}, {"bfloat16", false, false}, {"float32", true, false}, {"float32", false, false}} {
		cfg.Model.Dtype, cfg.Model.MasterFP32 = c.dtype, c.master
		o := RunStepOptions(cfg)
		if o.ComputeCopies != c.want || (c.want && o.ComputeDtype != mlx.BFloat16) || o.Accum != cfg.Accum || o.Compile != cfg.Compile {
			t.Errorf("dtype %s master %v: options %+v, want copies %v", c.dtype, c.master, o, c.want)
		}
	}
}
