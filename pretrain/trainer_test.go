package pretrain

import (
	"context"
	"math"
	"path/filepath"
	"testing"

	"github.com/posttrainllm/posttrainllm/internal/runtest"
	"github.com/posttrainllm/posttrainllm/internal/runtest/fixture"
	"github.com/posttrainllm/posttrainllm/mlx"
	"github.com/posttrainllm/posttrainllm/train"
)

func runTrainer(t *testing.T, cfg train.Config, dir, resume string) (train.Summary, []train.Metrics) {
	t.Helper()
	return runTrainerOn(t, cfg, memoryDataset(t, fixture.SyntheticText(60_000), cfg.Model.Context), dir, resume)
}

// runTrainerOn runs a trainer of cfg on ds in dir (resuming from resume
// when set) and returns its summary and logged metrics.
func runTrainerOn(t testing.TB, cfg train.Config, ds *Dataset, dir, resume string) (train.Summary, []train.Metrics) {
	t.Helper()
	tr, err := New(cfg, ds, dir)
	if err != nil {
		t.Fatal(err)
	}
	sum, err := tr.Run(context.Background(), resume)
	if err != nil {
		t.Fatal(err)
	}
	ms, err := train.ReadMetrics(filepath.Join(dir, train.MetricsFile))
	if err != nil {
		t.Fatal(err)
	}
	return sum, ms
}

// A 50-step run with a cosine schedule and accum=4 traces the step exactly
// once while the learning rate changes every step.
func TestCosineAccumRunTracesOnce(t *testing.T) {
	cfg := runtest.TinyConfig()
	cfg.Steps, cfg.Accum, cfg.Warmup = 50, 4, 10
	sum, ms := runTrainer(t, cfg, t.TempDir(), "")
	if sum.Traces != 1 {
		t.Fatalf("step traced %d times, want exactly 1", sum.Traces)
	}
	if len(ms) != 50 {
		t.Fatalf("%d metrics lines, want 50", len(ms))
	}
	for i := 1; i < len(ms); i++ {
		if ms[i].LR == ms[i-1].LR {
			t.Fatalf("lr did not change between steps %d and %d (%g)", ms[i-1].Step, ms[i].Step, ms[i].LR)
		}
	}
	if !(ms[len(ms)-1].Loss < ms[0].Loss) {
		t.Fatalf("loss did not fall: first %g, last %g", ms[0].Loss, ms[len(ms)-1].Loss)
	}
}

func TestCompiledAndInterpretedAgree(t *testing.T) {
	cfg := runtest.TinyConfig()
	cfg.Accum = 2
	_, compiled := runTrainer(t, cfg, t.TempDir(), "")
	cfg.Compile = false
	sum, interp := runTrainer(t, cfg, t.TempDir(), "")
	if sum.Traces != cfg.Steps {
		t.Fatalf("interpreted step body ran %d times, want %d", sum.Traces, cfg.Steps)
	}
	for i := range compiled {
		if d := math.Abs(compiled[i].Loss - interp[i].Loss); d > 2e-4*math.Max(1, compiled[i].Loss) {
			t.Fatalf("step %d: compiled loss %.6f, interpreted %.6f", compiled[i].Step, compiled[i].Loss, interp[i].Loss)
		}
	}
}

// A trainer run of a bfloat16 model on float32 masters uses the copies,
// traces once and learns; its checkpoint holds the float32 masters only.
func TestMixedPrecisionRunUsesCopies(t *testing.T) {
	cfg := runtest.TinyConfig()
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
	ck, err := train.LoadCheckpoint(sum.LastCheckpoint)
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
