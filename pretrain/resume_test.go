package pretrain

import (
	"context"
	"errors"
	"math"
	"testing"

	"github.com/posttrainllm/posttrainllm/checkpoint"
	"github.com/posttrainllm/posttrainllm/internal/runtest"
	"github.com/posttrainllm/posttrainllm/internal/runtest/fixture"
	"github.com/posttrainllm/posttrainllm/train"
)

// interruptAt runs cfg in dir and cancels the run's context once step has
// been logged, as SIGINT does through the CLI; it asserts ErrInterrupted.
func interruptAt(t *testing.T, cfg train.Config, dir string, step int) train.Summary {
	t.Helper()
	tr, err := New(cfg, memoryDataset(t, fixture.SyntheticText(60_000), cfg.Model.Context), dir)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	tr.Hooks.OnLog = func(m train.Metrics) {
		if m.Step == step {
			cancel()
		}
	}
	sum, err := tr.Run(ctx, "")
	if !errors.Is(err, train.ErrInterrupted) {
		t.Fatalf("want a run interrupted at step %d, got %v", step, err)
	}
	return sum
}

// Resuming after step k reproduces the uninterrupted run's losses at steps
// k+1 … k+10 exactly (same arithmetic, same data order).
func TestResumeReproducesUninterruptedRun(t *testing.T) {
	cfg := runtest.TinyConfig()
	cfg.Steps, cfg.Accum = 20, 2
	_, full := runTrainer(t, cfg, t.TempDir(), "")

	dir := t.TempDir()
	interruptAt(t, cfg, dir, 10)
	ck, err := checkpoint.Latest(dir)
	if err != nil {
		t.Fatal(err)
	}
	_, resumed := runTrainer(t, cfg, dir, ck)
	if len(resumed) != 20 || resumed[10].Step != 11 {
		t.Fatalf("resumed metrics hold %d lines (want 20), line 10 is step %d", len(resumed), resumed[10].Step)
	}
	for i := 10; i < 20; i++ {
		if full[i].Step != resumed[i].Step || full[i].Loss != resumed[i].Loss {
			t.Fatalf("step %d: uninterrupted loss %.7f, resumed %.7f", full[i].Step, full[i].Loss, resumed[i].Loss)
		}
	}
}

func TestInterruptedRunCheckpointsAndResumes(t *testing.T) {
	cfg := runtest.TinyConfig()
	cfg.Steps = 12
	dir := t.TempDir()
	sum := interruptAt(t, cfg, dir, 5)
	if sum.Step != 5 || sum.LastCheckpoint == "" {
		t.Fatalf("interrupted at step %d with checkpoint %q, want step 5 and a checkpoint", sum.Step, sum.LastCheckpoint)
	}
	_, ms := runTrainer(t, cfg, dir, sum.LastCheckpoint)
	if last := ms[len(ms)-1]; last.Step != 12 || math.IsNaN(last.Loss) {
		t.Fatalf("resumed run ended at step %d loss %v", last.Step, last.Loss)
	}
}

func TestNonFiniteLossStopsWithoutCheckpoint(t *testing.T) {
	cfg := runtest.TinyConfig()
	cfg.Steps, cfg.CheckpointEvery = 30, 5
	cfg.Schedule, cfg.LR, cfg.MinLR, cfg.Warmup, cfg.GradClip = "constant", 1e30, 0, 0, 0
	cfg.Optimizer = "sgd"
	dir := t.TempDir()
	ds := memoryDataset(t, fixture.SyntheticText(60_000), cfg.Model.Context)
	tr, err := New(cfg, ds, dir)
	if err != nil {
		t.Fatal(err)
	}
	sum, err := tr.Run(context.Background(), "")
	if !errors.Is(err, train.ErrNonFinite) {
		t.Fatalf("want ErrNonFinite, got %v (summary %+v)", err, sum)
	}
	if dirs, _ := checkpoint.List(checkpoint.Root(dir)); len(dirs) > 0 {
		if _, err := train.LoadCheckpoint(dirs[len(dirs)-1]); err != nil {
			t.Fatalf("last checkpoint does not load: %v", err)
		}
	}
}

// A run checkpointed under one plan resumes under another and continues
// where it stopped: the same windows (the sampler's state does not depend
// on the plan) and, to float rounding, the same losses as without the
// interruption; the metrics say which plan each update ran.
func TestResumeUnderAnotherPlan(t *testing.T) {
	cfg := runtest.TinyConfig()
	cfg.Steps, cfg.Batch, cfg.Accum = 8, 2, 4
	_, full := runTrainer(t, cfg, t.TempDir(), "")

	dir := t.TempDir()
	interruptAt(t, cfg, dir, 4)
	ck, err := checkpoint.Latest(dir)
	if err != nil {
		t.Fatal(err)
	}
	folded := cfg
	folded.MicroBatch = 8
	sum, resumed := runTrainer(t, folded, dir, ck)
	if sum.Plan.MicroBatch != 8 || sum.Plan.Steps != 1 {
		t.Fatalf("resumed under plan %+v, want micro-batch 8 × 1", sum.Plan)
	}
	if len(resumed) != 8 {
		t.Fatalf("%d metrics lines, want 8", len(resumed))
	}
	for i, m := range resumed {
		wantMB, wantSteps := 2, 4
		if i >= 4 {
			wantMB, wantSteps = 8, 1
		}
		if m.MicroBatch != wantMB || m.AccumSteps != wantSteps {
			t.Errorf("step %d ran micro-batch %d × %d, want %d × %d", m.Step, m.MicroBatch, m.AccumSteps, wantMB, wantSteps)
		}
		if d := math.Abs(m.Loss - full[i].Loss); d > 1e-5*full[i].Loss {
			t.Errorf("step %d: loss %.7f resumed under micro-batch 8, %.7f uninterrupted", m.Step, m.Loss, full[i].Loss)
		}
	}
}
