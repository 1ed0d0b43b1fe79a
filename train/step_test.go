package train

import (
	"math"
	"strings"
	"testing"

	"github.com/posttrainllm/posttrainllm/internal/mlxtest"
	"github.com/posttrainllm/posttrainllm/internal/runtest/fixture"
	"github.com/posttrainllm/posttrainllm/mlx"
	"github.com/posttrainllm/posttrainllm/model"
	"github.com/posttrainllm/posttrainllm/optim"
	"github.com/posttrainllm/posttrainllm/step"
)

// plainSGD updates p ← p − lr·g, so a step's parameter change is −lr × the
// averaged gradient.
func plainSGD(t testing.TB, m *model.Transformer) optim.Optimizer {
	t.Helper()
	oc := optim.DefaultConfig()
	oc.SGD.Momentum, oc.SGD.WeightDecay = 0, 0
	o, err := optim.New("sgd", OptimizerParams(m.Specs), oc)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

func stepSetup(t testing.TB) (*model.Transformer, []*mlx.Array, []int32, []int32) {
	t.Helper()
	m, err := model.New(model.Config{VocabSize: 256, DModel: 32, Layers: 2, Heads: 2, Context: 16})
	if err != nil {
		t.Fatal(err)
	}
	params, err := m.Init(3)
	if err != nil {
		t.Fatal(err)
	}
	ds := memoryDataset(t, fixture.SyntheticText(20_000), 16)
	xs, ys := make([]int32, 16*16), make([]int32, 16*16)
	for i := 0; i < 16; i++ {
		ds.Train.CopyInto(xs[i*16:(i+1)*16], i*97)
		ds.Train.CopyInto(ys[i*16:(i+1)*16], i*97+1)
	}
	return m, params, xs, ys
}

// sgdStep builds a plain SGD step over m's parameters and its optimizer
// state.
func sgdStep(t testing.TB, m *model.Transformer, opts step.StepOptions) (*step.Step, []*mlx.Array) {
	t.Helper()
	opt := plainSGD(t, m)
	state, err := opt.Init()
	if err != nil {
		t.Fatal(err)
	}
	s, err := step.NewStep(step.MeanLoss(m.Loss), opt, step.Layout{Trainable: len(m.Specs), State: len(state)}, opts)
	if err != nil {
		t.Fatal(err)
	}
	return s, state
}

func runStep(t testing.TB, m *model.Transformer, params []*mlx.Array, xs, ys []int32, accum int, lr float64, compile bool) ([]float32, *step.Step) {
	t.Helper()
	s, state := sgdStep(t, m, step.StepOptions{Accum: accum, Compile: compile})
	b := 16 / accum
	res, err := s.Run(params, state, mlx.Scalar(lr, mlx.Float32),
		mlx.FromSlice(xs, accum, b, 16), mlx.FromSlice(ys, accum, b, 16))
	if err != nil {
		t.Fatal(err)
	}
	delta, err := mlx.Subtract(res.Params[2], params[2]).Float32s()
	if err != nil {
		t.Fatal(err)
	}
	return delta, s
}

// accum=4 × B=4 gives the same update as accum=1 × B=16.
func TestAccumulationMatchesLargeBatch(t *testing.T) {
	mlxtest.Run(t, func(t testing.TB) {
		m, params, xs, ys := stepSetup(t)
		big, _ := runStep(t, m, params, xs, ys, 1, 1, true)
		acc, _ := runStep(t, m, params, xs, ys, 4, 1, true)
		var maxDiff, maxAbs float64
		for i := range big {
			maxDiff = math.Max(maxDiff, math.Abs(float64(big[i]-acc[i])))
			maxAbs = math.Max(maxAbs, math.Abs(float64(big[i])))
		}
		if maxAbs == 0 {
			t.Fatal("the update is zero; the test cannot tell anything")
		}
		if maxDiff > 1e-5*math.Max(1, maxAbs)+1e-7 {
			t.Fatalf("accum 4×4 and 1×16 updates differ by %g (largest update %g)", maxDiff, maxAbs)
		}
	})
}

// The learning rate is an input: one compiled step, called with lr and
// 2·lr, moves the parameters twice as far, and traces once.
func TestLearningRateIsAnInput(t *testing.T) {
	mlxtest.Run(t, func(t testing.TB) {
		m, params, xs, ys := stepSetup(t)
		s, state := sgdStep(t, m, step.StepOptions{Accum: 2, Compile: true})
		deltas := make([][]float32, 2)
		for i, lr := range []float64{0.1, 0.2} {
			res, err := s.Run(params, state, mlx.Scalar(lr, mlx.Float32),
				mlx.FromSlice(xs, 2, 8, 16), mlx.FromSlice(ys, 2, 8, 16))
			if err != nil {
				t.Fatal(err)
			}
			deltas[i], _ = mlx.Subtract(res.Params[2], params[2]).Float32s()
		}
		if s.Traces() != 1 {
			t.Fatalf("traced %d times for two lr values, want 1", s.Traces())
		}
		for i := range deltas[0] {
			if d := math.Abs(float64(deltas[1][i] - 2*deltas[0][i])); d > 1e-6+1e-4*math.Abs(float64(deltas[1][i])) {
				t.Fatalf("update at lr 0.2 is not twice the update at 0.1: %g vs %g", deltas[1][i], deltas[0][i])
			}
		}
	})
}

// Inputs that would fail inside the traced function, or trace it again,
// are refused with the value and what was expected: a batch of the wrong
// shape or dtype, and a learning rate that is not a 0-D float32 array.
func TestStepRejectsBadInputs(t *testing.T) {
	mlxtest.Run(t, func(t testing.TB) {
		m, params, xs, ys := stepSetup(t)
		s, state := sgdStep(t, m, step.StepOptions{Accum: 4, Compile: true})
		defer s.Free()
		lr := mlx.Scalar(0.1, mlx.Float32)
		x, y := mlx.FromSlice(xs, 4, 4, 16), mlx.FromSlice(ys, 4, 4, 16)
		for _, c := range []struct {
			lr, x, y *mlx.Array
			want     string
		}{
			{lr, mlx.FromSlice(xs, 2, 8, 16), mlx.FromSlice(ys, 2, 8, 16), "shape [2 8 16], want [accum=4"},
			{lr, x, mlx.FromSlice(ys[:128], 4, 2, 16), "x has shape [4 4 16], y [4 2 16]"},
			{lr, mlx.AsType(x, mlx.Float32), y, "batch x is float32, want int32"},
			{mlx.Scalar(0.1, mlx.Float16), x, y, "lr is a float16 array"},
			{mlx.Scalar(0.1, mlx.BFloat16), x, y, "lr is a bfloat16 array"},
			{mlx.FromSlice([]float32{0.1}, 1), x, y, "of shape [1], want a 0-D float32 array"},
		} {
			if _, err := s.Run(params, state, c.lr, c.x, c.y); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("Run = %v, want an error containing %q", err, c.want)
			}
		}
		if s.Traces() != 0 {
			t.Fatalf("rejected inputs traced the step %d times", s.Traces())
		}
		if _, err := step.NewStep(step.MeanLoss(m.Loss), plainSGD(t, m), step.Layout{Trainable: len(params), State: len(state)}, step.StepOptions{Accum: 0}); err == nil {
			t.Fatal("accum 0 accepted")
		}
	})
}
