package pretrain

import (
	"slices"
	"strings"
	"testing"

	"github.com/posttrainllm/posttrainllm/data"
	"github.com/posttrainllm/posttrainllm/internal/runtest"
	"github.com/posttrainllm/posttrainllm/internal/runtest/fixture"
	"github.com/posttrainllm/posttrainllm/mlx"
	"github.com/posttrainllm/posttrainllm/step"
	"github.com/posttrainllm/posttrainllm/train"
)

// hessianState reads every "<param>.sophia_h" array of s, concatenated.
func hessianState(t *testing.T, s *train.Setup) []float32 {
	t.Helper()
	var out []float32
	err := mlx.Do(func() error {
		for j, name := range s.Optimizer.StateNames() {
			if !strings.HasSuffix(name, ".sophia_h") {
				continue
			}
			f, err := s.State.OptState()[j].Float32s()
			if err != nil {
				return err
			}
			out = append(out, f...)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// The Hessian estimate is one compiled function whose random key is an
// input: it traces once, its estimates change from one update number to
// the next, and the same update number gives the same estimate.
func TestSophiaEstimateTracesOnceWithKeyInput(t *testing.T) {
	cfg := runtest.TinyConfig()
	cfg.Optimizer = "sophia"
	ds := memoryDataset(t, fixture.SyntheticText(20_000), cfg.Model.Context)
	s, m, cfg := runtest.PreparedSetup(t, cfg)
	e, err := NewSophiaEstimator(s.Optimizer, m, cfg.Seed, true)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Free()
	sampler, err := data.NewSampler(ds.Train, cfg.Model.Context, cfg.Seed)
	if err != nil {
		t.Fatal(err)
	}
	batch, err := s.Plan.NewBatch(cfg.Model.Context)
	if err != nil {
		t.Fatal(err)
	}
	if err := sampler.FillBatch(batch); err != nil {
		t.Fatal(err)
	}
	if h := hessianState(t, s); slices.ContainsFunc(h, func(v float32) bool { return v != 0 }) {
		t.Fatal("initial Hessian estimate is not zero")
	}
	var after [][]float32
	for _, upd := range []int{0, 10, 20} {
		if err := e.Estimate(s.State, step.BatchOf(batch), upd); err != nil {
			t.Fatal(err)
		}
		after = append(after, hessianState(t, s))
	}
	if e.Traces() != 1 {
		t.Fatalf("the estimate traced %d times in 3 calls, want 1", e.Traces())
	}
	if !slices.ContainsFunc(after[0], func(v float32) bool { return v > 0 }) {
		t.Fatal("the first estimate left h at zero")
	}
	// From the same zero state, the estimate of update 10 again equals the
	// first one of update 10, and that of update 20 differs: the key, an
	// input, changes the sampled labels without a new trace.
	estimateFresh := func(upd int) []float32 {
		fresh, err := train.NewSetup(cfg, m, "")
		if err != nil {
			t.Fatal(err)
		}
		defer fresh.Free()
		if err := e.Estimate(fresh.State, step.BatchOf(batch), upd); err != nil {
			t.Fatal(err)
		}
		return hessianState(t, fresh)
	}
	first10, again10, fresh20 := estimateFresh(10), estimateFresh(10), estimateFresh(20)
	if !slices.Equal(first10, again10) {
		t.Fatal("two estimates of update 10 from the same state differ")
	}
	if slices.Equal(first10, fresh20) {
		t.Fatal("the estimates of updates 10 and 20 are equal: the key did not reach the trace")
	}
	if e.Traces() != 1 {
		t.Fatalf("the estimate traced %d times in 6 calls, want 1", e.Traces())
	}
}

// A Sophia run estimates every sophia_every updates, traces its step once
// and learns.
func TestSophiaRunLearns(t *testing.T) {
	cfg := runtest.TinyConfig()
	cfg.Optimizer, cfg.SophiaEvery, cfg.LR, cfg.MinLR = "sophia", 3, 2e-3, 2e-4
	cfg.Steps = 30
	sum, ms := runTrainer(t, cfg, t.TempDir(), "")
	if sum.Traces != 1 {
		t.Fatalf("step traced %d times, want 1", sum.Traces)
	}
	if !(ms[len(ms)-1].Loss < ms[0].Loss-0.5) {
		t.Fatalf("loss went from %g to %g in 30 Sophia updates, want it lower by more than 0.5", ms[0].Loss, ms[len(ms)-1].Loss)
	}
}
