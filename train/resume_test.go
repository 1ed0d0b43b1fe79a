package train

import (
	"context"
	"errors"
	"math"
	"testing"

	"github.com/posttrainllm/posttrainllm/checkpoint"
)

// interruptAt runs cfg in dir and cancels the run's context once step has
// been logged, as SIGINT does through the CLI; it asserts ErrInterrupted.
func interruptAt(t *testing.T, cfg Config, dir string, step int) Summary {
	t.Helper()
	tr, err := New(cfg, memoryDataset(t, syntheticText(60_000), cfg.Model.Context), dir)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	tr.Hooks.OnLog = func(m Metrics) {
		if m.Step == step {
			cancel()
		}
	}
	sum, err := tr.Run(ctx, "")
	if !errors.Is(err, ErrInterrupted) {
		t.Fatalf("want a run interrupted at step %d, got %v", step, err)
	}
	return sum
}

// Resuming after step k reproduces the uninterrupted run's losses at steps
// k+1 … k+10 exactly (same arithmetic, same data order).
func TestResumeReproducesUninterruptedRun(t *testing.T) {
	cfg := tinyConfig()
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
	cfg := tinyConfig()
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
	cfg := tinyConfig()
	cfg.Steps, cfg.CheckpointEvery = 30, 5
	cfg.Schedule, cfg.LR, cfg.MinLR, cfg.Warmup, cfg.GradClip = "constant", 1e30, 0, 0, 0
	cfg.Optimizer = "sgd"
	dir := t.TempDir()
	ds := memoryDataset(t, syntheticText(60_000), cfg.Model.Context)
	tr, err := New(cfg, ds, dir)
	if err != nil {
		t.Fatal(err)
	}
	sum, err := tr.Run(context.Background(), "")
	if !errors.Is(err, ErrNonFinite) {
		t.Fatalf("want ErrNonFinite, got %v (summary %+v)", err, sum)
	}
	if dirs, _ := checkpoint.List(checkpoint.Root(dir)); len(dirs) > 0 {
		if _, err := LoadCheckpoint(dirs[len(dirs)-1]); err != nil {
			t.Fatalf("last checkpoint does not load: %v", err)
		}
	}
}
