package pretrain

import (
	"context"
	"errors"
	"math"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/posttrainllm/posttrainllm/checkpoint"
	"github.com/posttrainllm/posttrainllm/internal/runtest"
	"github.com/posttrainllm/posttrainllm/internal/runtest/fixture"
	"github.com/posttrainllm/posttrainllm/mlx"
	"github.com/posttrainllm/posttrainllm/model"
	"github.com/posttrainllm/posttrainllm/train"
)

// A long run of 10 000 tiny steps through the Trainer keeps MLX's active
// memory flat after warm-up and leaves no goroutines behind.
func TestLongRunMemoryAndGoroutinesFlat(t *testing.T) {
	const steps, warm = 10_000, 100
	cfg := runtest.TinyConfig()
	cfg.Model = model.Config{VocabSize: 256, DModel: 16, Layers: 1, Heads: 2, Context: 16}
	cfg.Steps, cfg.Batch, cfg.Warmup, cfg.LogEvery = steps, 2, 10, 100
	ds := memoryDataset(t, fixture.SyntheticText(20_000), cfg.Model.Context)
	tr, err := New(cfg, ds, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	// The MLX thread's goroutine starts on first use and lives for the
	// process: start it before counting.
	mlx.Do(func() error { return nil })
	goroutines := runtime.NumGoroutine()
	var atWarm, maxAfter uint64
	logs := 0
	tr.Hooks.OnLog = func(m train.Metrics) {
		logs++
		active := mlx.Memory().Active
		if m.Step == warm {
			atWarm = active
		}
		if m.Step >= warm {
			maxAfter = max(maxAfter, active)
		}
	}
	sum, err := tr.Run(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	if sum.Step != steps || logs != steps/cfg.LogEvery {
		t.Fatalf("ran %d steps with %d logs, want %d and %d", sum.Step, logs, steps, steps/cfg.LogEvery)
	}
	if sum.Traces != 1 {
		t.Fatalf("step traced %d times in a long run, want 1", sum.Traces)
	}
	const slack = 1 << 20
	if atWarm == 0 || maxAfter > atWarm+slack {
		t.Fatalf("MLX active memory %d bytes at step %d, up to %d later; want growth <= %d bytes", atWarm, warm, maxAfter, slack)
	}
	// The prefetcher's goroutine ends in Stop; give the runtime a moment to
	// retire it before counting.
	after := runtime.NumGoroutine()
	for i := 0; i < 100 && after > goroutines; i++ {
		time.Sleep(10 * time.Millisecond)
		after = runtime.NumGoroutine()
	}
	if after > goroutines {
		t.Fatalf("%d goroutines before the run, %d after", goroutines, after)
	}
	t.Logf("%d steps in %v; active memory %d bytes at step %d, max %d after", steps, sum.Elapsed, atWarm, warm, maxAfter)
}

// An update that overflows the parameters while the loss it was computed
// from is still finite is caught before the checkpoint it would poison.
func TestOverflowingUpdateWritesNoCheckpoint(t *testing.T) {
	cfg := runtest.TinyConfig()
	cfg.Steps, cfg.CheckpointEvery, cfg.LogEvery = 10, 1, 5
	// AdamW moves every weight by about lr, and weight decay by lr·wd·|w|
	// more: with the largest float32 lr, some weights overflow at once.
	wd := 0.1
	cfg.Schedule, cfg.LR, cfg.MinLR, cfg.Warmup, cfg.GradClip, cfg.WeightDecay = "constant", math.MaxFloat32, 0, 0, 0, &wd
	dir := t.TempDir()
	tr, err := New(cfg, memoryDataset(t, fixture.SyntheticText(60_000), cfg.Model.Context), dir)
	if err != nil {
		t.Fatal(err)
	}
	sum, err := tr.Run(context.Background(), "")
	if !errors.Is(err, train.ErrNonFinite) || !strings.Contains(err.Error(), "step 1: parameter") {
		t.Fatalf("want ErrNonFinite naming a parameter at step 1, got %v", err)
	}
	if dirs, _ := checkpoint.List(checkpoint.Root(dir)); len(dirs) != 0 || sum.LastCheckpoint != "" {
		t.Fatalf("a diverged run wrote checkpoints %v", dirs)
	}
}
