package train

import (
	"fmt"
	"math"
	"testing"

	"github.com/posttrainllm/posttrainllm/mlx"
	"github.com/posttrainllm/posttrainllm/model"
	"github.com/posttrainllm/posttrainllm/optim"
)

const copiesAccum, copiesB, copiesT = 2, 4, 16

// mixedSetup builds a tiny model computing in bfloat16 on float32 masters,
// its initial parameters, and a loss that records the dtype of the
// parameters it was last called with.
func mixedSetup(t *testing.T) (*model.TinyGPT, []*mlx.Array, LossFunc, *mlx.Dtype) {
	t.Helper()
	m, err := model.New(model.Config{VocabSize: 256, DModel: 32, Layers: 2, Heads: 2, Context: copiesT,
		Dtype: "bfloat16", MasterFP32: true})
	if err != nil {
		t.Fatal(err)
	}
	params, err := m.Init(5)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mlx.Free(params...) })
	if params[0].Dtype() != mlx.Float32 {
		t.Fatalf("masters are %v, want float32", params[0].Dtype())
	}
	seen := new(mlx.Dtype)
	loss := func(p []*mlx.Array, x, y *mlx.Array) *mlx.Array {
		*seen = p[0].Dtype()
		return m.Loss(p, x, y)
	}
	return m, params, loss, seen
}

// copiesBatch returns step i's [accum, B, T] inputs and targets.
func copiesBatch(t *testing.T, ds *Dataset, i int) (x, y *mlx.Array) {
	t.Helper()
	n := copiesAccum * copiesB
	xs, ys := make([]int32, n*copiesT), make([]int32, n*copiesT)
	for r := 0; r < n; r++ {
		off := (i*n + r) * 53 % (ds.Train.Len() - copiesT - 1)
		ds.Train.CopyInto(xs[r*copiesT:(r+1)*copiesT], off)
		ds.Train.CopyInto(ys[r*copiesT:(r+1)*copiesT], off+1)
	}
	return mlx.FromSlice(xs, copiesAccum, copiesB, copiesT), mlx.FromSlice(ys, copiesAccum, copiesB, copiesT)
}

// copiesRun holds a Step with AdamW state and runs updates on it.
type copiesRun struct {
	t      *testing.T
	step   *Step
	state  []*mlx.Array
	ds     *Dataset
	losses []float64
}

func newCopiesRun(t *testing.T, m *model.TinyGPT, loss LossFunc, opts StepOptions) *copiesRun {
	t.Helper()
	oc := optim.DefaultConfig()
	opt, err := optim.New("adamw", OptimizerParams(m.Specs), oc)
	if err != nil {
		t.Fatal(err)
	}
	state, err := opt.Init()
	if err != nil {
		t.Fatal(err)
	}
	opts.Accum, opts.GradClip = copiesAccum, 1
	s, err := NewStep(loss, opt, len(m.Specs), len(state), opts)
	if err != nil {
		t.Fatal(err)
	}
	r := &copiesRun{t: t, step: s, state: state, ds: memoryDataset(t, syntheticText(20_000), copiesT)}
	t.Cleanup(func() {
		mlx.Free(r.state...)
		r.step.Free()
	})
	return r
}

// run applies n updates starting from params (not freed) with data steps
// first..first+n-1, feeding each result's Params into the next update, and
// returns the final parameters, owned by the caller.
func (r *copiesRun) run(params []*mlx.Array, first, n int) []*mlx.Array {
	r.t.Helper()
	cur := params
	for i := first; i < first+n; i++ {
		x, y := copiesBatch(r.t, r.ds, i)
		lr := mlx.Scalar(1e-2, mlx.Float32)
		res, err := r.step.Run(cur, r.state, lr, x, y)
		mlx.Free(x, y, lr)
		if err != nil {
			r.t.Fatal(err)
		}
		if i > first {
			mlx.Free(cur...)
		}
		mlx.Free(r.state...)
		cur, r.state = res.Params, res.State
		pending := append(append(append([]*mlx.Array{}, cur...), r.state...), res.GradNorm)
		if err := mlx.Eval(append(pending, r.step.Copies()...)...); err != nil {
			r.t.Fatal(err)
		}
		l, err := res.Loss.Item()
		if err != nil {
			r.t.Fatal(err)
		}
		r.losses = append(r.losses, l)
		mlx.Free(res.Loss, res.GradNorm)
	}
	return cur
}

// assertSame fails unless a and b agree within 1e-6 relative, element by
// element, and reports whether they are bit-identical.
func assertSame(t *testing.T, what string, a, b []*mlx.Array) (identical bool) {
	t.Helper()
	identical = true
	for i := range a {
		av, err := a[i].Float32s()
		if err != nil {
			t.Fatal(err)
		}
		bv, err := b[i].Float32s()
		if err != nil {
			t.Fatal(err)
		}
		for j := range av {
			if av[j] != bv[j] {
				identical = false
			}
			if d := math.Abs(float64(av[j] - bv[j])); d > 1e-6*math.Abs(float64(av[j])) {
				t.Fatalf("%s: parameter %d element %d: %g vs %g", what, i, j, av[j], bv[j])
			}
		}
	}
	return identical
}

func maxAbs(v []float32) float64 {
	var m float64
	for _, x := range v {
		m = math.Max(m, math.Abs(float64(x)))
	}
	return m
}

func assertSameLosses(t *testing.T, what string, a, b []float64) {
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

// Differentiating with respect to bfloat16 copies carried by the step gives
// the updates of a loss that casts the float32 masters itself, compiled and
// interpreted.
func TestComputeCopiesMatchMasterCasts(t *testing.T) {
	lockThread(t)
	const steps = 6
	for _, compile := range []bool{true, false} {
		t.Run(fmt.Sprintf("compile=%v", compile), func(t *testing.T) {
			lockThread(t)
			m, params, loss, seen := mixedSetup(t)
			base := newCopiesRun(t, m, loss, StepOptions{Compile: compile})
			want := base.run(params, 0, steps)
			defer mlx.Free(want...)
			if *seen != mlx.Float32 {
				t.Fatalf("without copies the loss saw %v parameters, want the float32 masters", *seen)
			}
			cp := newCopiesRun(t, m, loss, StepOptions{Compile: compile, ComputeCopies: true, ComputeDtype: mlx.BFloat16})
			got := cp.run(params, 0, steps)
			defer mlx.Free(got...)
			if *seen != mlx.BFloat16 {
				t.Fatalf("with copies the loss saw %v parameters, want bfloat16", *seen)
			}
			for i, c := range cp.step.Copies() {
				if c.Dtype() != mlx.BFloat16 || got[i].Dtype() != mlx.Float32 {
					t.Fatalf("param %d: copy %v, master %v; want bfloat16 and float32", i, c.Dtype(), got[i].Dtype())
				}
			}
			if d, _ := mlx.Subtract(want[2], params[2]).Float32s(); maxAbs(d) == 0 {
				t.Fatal("the parameters did not move; the comparison tells nothing")
			}
			assertSameLosses(t, "with vs without copies", base.losses, cp.losses)
			identical := assertSame(t, "with vs without copies", want, got)
			t.Logf("%d steps: bit-identical params: %v", steps, identical)
			if want := map[bool]int{true: 1, false: steps}[compile]; cp.step.Traces() != want {
				t.Fatalf("step body ran %d times, want %d", cp.step.Traces(), want)
			}
		})
	}
}

// Fed back its own results the step reuses its copies and traces once;
// given other parameters (a restart from the initial ones) it casts them
// itself, still without tracing again, and gives the same numbers as a
// fresh step.
func TestComputeCopiesCacheHitAndMiss(t *testing.T) {
	lockThread(t)
	const steps = 10
	m, params, loss, _ := mixedSetup(t)
	ref := newCopiesRun(t, m, loss, StepOptions{Compile: true})
	want := ref.run(params, 0, steps)
	defer mlx.Free(want...)

	cp := newCopiesRun(t, m, loss, StepOptions{Compile: true, ComputeCopies: true, ComputeDtype: mlx.BFloat16})
	cur := params
	for i := 0; i < steps; i++ {
		prev := cp.step.Copies()
		if hit := cp.step.cachedCopies(cur) != nil; hit != (i > 0) {
			t.Fatalf("step %d: cache hit %v, want %v", i, hit, i > 0)
		}
		next := cp.run(cur, i, 1)
		if i > 0 {
			mlx.Free(cur...)
			for j, c := range prev {
				if c.Valid() {
					t.Fatalf("step %d: the previous copy of param %d is still live", i, j)
				}
			}
		}
		cur = next
	}
	if cp.step.Traces() != 1 {
		t.Fatalf("traced %d times over %d fed-back steps, want 1", cp.step.Traces(), steps)
	}
	assertSameLosses(t, "fed back", ref.losses, cp.losses)
	assertSame(t, "fed back", want, cur)
	mlx.Free(cur...)

	// Restart from the initial parameters with fresh optimizer state: a miss.
	if cp.step.cachedCopies(params) != nil {
		t.Fatal("cache hit for parameters the step did not produce")
	}
	mlx.Free(cp.state...)
	opt, _ := optim.New("adamw", OptimizerParams(m.Specs), optim.DefaultConfig())
	cp.state, _ = opt.Init()
	cp.losses = nil
	again := cp.run(params, 0, steps)
	defer mlx.Free(again...)
	if cp.step.Traces() != 1 {
		t.Fatalf("traced %d times after a restart, want 1", cp.step.Traces())
	}
	assertSameLosses(t, "restarted", ref.losses, cp.losses)
	assertSame(t, "restarted", want, again)
}

// Many steps with the cache keep MLX's active memory flat: each update
// frees the copies it replaces.
func TestComputeCopiesMemoryIsFlat(t *testing.T) {
	lockThread(t)
	const warm, steps = 10, 200
	m, params, loss, _ := mixedSetup(t)
	cp := newCopiesRun(t, m, loss, StepOptions{Compile: true, ComputeCopies: true, ComputeDtype: mlx.BFloat16})
	cur := cp.run(params, 0, warm)
	atWarm := mlx.Memory().Active
	for i := warm; i < steps; i++ {
		next := cp.run(cur, i, 1)
		mlx.Free(cur...)
		cur = next
	}
	after := mlx.Memory().Active
	mlx.Free(cur...)
	// One leaked copy of the smallest parameter (a norm, 32 bfloat16) per
	// step would add 64 B × 190.
	const slack = 1 << 10
	if after > atWarm+slack {
		t.Fatalf("active memory %d B after %d steps, %d B after %d: the copies leak", after, steps, atWarm, warm)
	}
	t.Logf("active memory %d B after %d steps, %d B after %d", after, steps, atWarm, warm)
}

// Free releases the copies the step holds.
func TestComputeCopiesFreedWithStep(t *testing.T) {
	lockThread(t)
	m, params, loss, _ := mixedSetup(t)
	for _, compile := range []bool{true, false} {
		cp := newCopiesRun(t, m, loss, StepOptions{Compile: compile, ComputeCopies: true, ComputeDtype: mlx.BFloat16})
		got := cp.run(params, 0, 2)
		copies := cp.step.Copies()
		if len(copies) != len(params) {
			t.Fatalf("compile=%v: step holds %d copies, want %d", compile, len(copies), len(params))
		}
		var bytes uint64
		for _, c := range copies {
			bytes += uint64(c.Nbytes())
		}
		before := mlx.Memory().Active
		cp.step.Free()
		after := mlx.Memory().Active
		for i, c := range copies {
			if c.Valid() {
				t.Fatalf("compile=%v: copy %d still live after Free", compile, i)
			}
		}
		if cp.step.Copies() != nil {
			t.Fatalf("compile=%v: Copies() after Free = %v", compile, cp.step.Copies())
		}
		if before < after+bytes {
			t.Fatalf("compile=%v: Free released %d B of active memory, the copies hold %d B", compile, int64(before)-int64(after), bytes)
		}
		// The masters are untouched and still usable.
		if _, err := got[0].Float32s(); err != nil {
			t.Fatal(err)
		}
		mlx.Free(got...)
	}
}

// Copies of parameters already in the compute dtype are the parameters
// themselves: the option is harmless there and changes no numbers.
func TestComputeCopiesOfSameDtype(t *testing.T) {
	lockThread(t)
	m, params, xs, ys := stepSetup(t)
	defer mlx.Free(params...)
	var deltas [2][]float32
	for i, on := range []bool{false, true} {
		opt := plainSGD(t, m)
		state, _ := opt.Init()
		opts := StepOptions{Accum: 1, Compile: true}
		if on {
			opts.ComputeCopies, opts.ComputeDtype = true, mlx.Float32
		}
		s, err := NewStep(m.Loss, opt, len(params), len(state), opts)
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
	lockThread(t)
	m, params, _, _ := stepSetup(t)
	defer mlx.Free(params...)
	opt := plainSGD(t, m)
	for _, o := range []StepOptions{
		{Accum: 1, ComputeCopies: true},                          // bool is not a compute dtype
		{Accum: 1, ComputeCopies: true, ComputeDtype: mlx.Int32}, // nor is int32
		{Accum: 1, ComputeDtype: mlx.BFloat16},                   // dtype without the switch
	} {
		if s, err := NewStep(m.Loss, opt, len(params), 0, o); err == nil {
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

// A trainer run of a bfloat16 model on float32 masters uses the copies,
// traces once and learns; its checkpoint holds the float32 masters only.
func TestMixedPrecisionRunUsesCopies(t *testing.T) {
	cfg := tinyConfig()
	cfg.Model.Dtype, cfg.Model.MasterFP32 = "bfloat16", true
	cfg.Steps = 30
	dir := t.TempDir()
	sum, ms := runTrainer(t, cfg, dir, "")
	if sum.Traces != 1 {
		t.Fatalf("traced %d times, want 1", sum.Traces)
	}
	if !(ms[len(ms)-1].Loss < ms[0].Loss) {
		t.Fatalf("loss did not fall: first %g, last %g", ms[0].Loss, ms[len(ms)-1].Loss)
	}
	ck, err := LoadCheckpoint(sum.LastCheckpoint)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Free()
	if len(ck.Params) != len(cfg.WithDefaults().Model.Specs()) {
		t.Fatalf("checkpoint holds %d parameter arrays", len(ck.Params))
	}
	for name, a := range ck.Params {
		if a.Dtype() != mlx.Float32 {
			t.Fatalf("checkpoint %q is %v, want the float32 master", name, a.Dtype())
		}
	}
}
