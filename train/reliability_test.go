package train

import (
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/posttrainllm/posttrainllm/checkpoint"
	"github.com/posttrainllm/posttrainllm/mlx"
	"github.com/posttrainllm/posttrainllm/model"
)

// A long run of 10 000 tiny steps through the Trainer keeps MLX's active
// memory flat after warm-up and leaves no goroutines behind.
func TestLongRunMemoryAndGoroutinesFlat(t *testing.T) {
	const steps, warm = 10_000, 100
	cfg := tinyConfig()
	cfg.Model = model.Config{VocabSize: 256, DModel: 16, Layers: 1, Heads: 2, Context: 16}
	cfg.Steps, cfg.Batch, cfg.Warmup, cfg.LogEvery = steps, 2, 10, 100
	ds := memoryDataset(t, syntheticText(20_000), cfg.Model.Context)
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
	tr.Hooks.OnLog = func(m Metrics) {
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
	cfg := tinyConfig()
	cfg.Steps, cfg.CheckpointEvery, cfg.LogEvery = 10, 1, 5
	// AdamW moves every weight by about lr, and weight decay by lr·wd·|w|
	// more: with the largest float32 lr, some weights overflow at once.
	wd := 0.1
	cfg.Schedule, cfg.LR, cfg.MinLR, cfg.Warmup, cfg.GradClip, cfg.WeightDecay = "constant", math.MaxFloat32, 0, 0, 0, &wd
	dir := t.TempDir()
	tr, err := New(cfg, memoryDataset(t, syntheticText(60_000), cfg.Model.Context), dir)
	if err != nil {
		t.Fatal(err)
	}
	sum, err := tr.Run(context.Background(), "")
	if !errors.Is(err, ErrNonFinite) || !strings.Contains(err.Error(), "step 1: parameter") {
		t.Fatalf("want ErrNonFinite naming a parameter at step 1, got %v", err)
	}
	if dirs, _ := checkpoint.List(checkpoint.Root(dir)); len(dirs) != 0 || sum.LastCheckpoint != "" {
		t.Fatalf("a diverged run wrote checkpoints %v", dirs)
	}
}

// Sizes that would wrap around in MLX's 32-bit shapes are refused by
// Validate, and sizes whose parameters or batch cannot fit in memory by
// CheckMemory, before MLX allocates anything.
func TestAbsurdSizesRefused(t *testing.T) {
	huge := func(f func(*Config)) Config {
		c := tinyConfig().WithDefaults()
		f(&c)
		return c
	}
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{huge(func(c *Config) { c.Model.VocabSize = 1 << 40 }), "vocab_size = 1099511627776, want <= 2147483647"},
		{huge(func(c *Config) { c.Model.Context = math.MaxInt }), "context = 9223372036854775807, want <= 2147483647"},
		{huge(func(c *Config) { c.Batch = 1 << 31 }), "batch = 2147483648, want <= 2147483647"},
	} {
		if err := c.cfg.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Validate() = %v, want %q", err, c.want)
		}
	}
	if physicalMemory() == 0 {
		t.Fatal("physicalMemory() = 0 on this platform; CheckMemory cannot guard it")
	}
	for _, cfg := range []Config{
		huge(func(c *Config) { c.Model.VocabSize, c.Model.DModel = 2_000_000_000, 1024 }),
		huge(func(c *Config) { c.Model.DModel, c.Model.Heads = 1<<20, 2 }),
		huge(func(c *Config) { c.Model.Layers = 1 << 30 }),
		huge(func(c *Config) { c.Batch, c.Model.Context = 1<<30, 1<<20 }),
	} {
		if err := cfg.Validate(); err != nil {
			t.Fatalf("Validate() = %v, want these sizes valid in themselves", err)
		}
		if err := cfg.CheckMemory(); err == nil || !strings.Contains(err.Error(), "more than the") {
			t.Errorf("CheckMemory(%+v) = %v, want it refused", cfg.Model, err)
		}
		if _, err := New(cfg, memoryDataset(t, syntheticText(2_000), 32), t.TempDir()); err == nil {
			t.Errorf("New accepted a run needing %.3g bytes", cfg.MinMemory().Total())
		}
	}
	if err := tinyConfig().WithDefaults().CheckMemory(); err != nil {
		t.Fatalf("tiny config refused: %v", err)
	}
}

// The committed seed corpus of FuzzReadCheckpointState is in Go's fuzz file
// format and means what its names say: seeds named valid* parse, every
// other seed is rejected with an error.
func TestCheckpointStateSeedCorpus(t *testing.T) {
	dir := filepath.Join("testdata", "fuzz", "FuzzReadCheckpointState")
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	valid, invalid := 0, 0
	for _, e := range entries {
		text, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		header, value, _ := strings.Cut(strings.TrimSuffix(string(text), "\n"), "\n")
		quoted, ok := strings.CutPrefix(value, "[]byte(")
		quoted, ok2 := strings.CutSuffix(quoted, ")")
		b, err := strconv.Unquote(quoted)
		if header != "go test fuzz v1" || !ok || !ok2 || err != nil {
			t.Fatalf("%s: not a go test fuzz v1 file holding one []byte", e.Name())
		}
		_, err = ParseRunState([]byte(b))
		if strings.HasPrefix(e.Name(), "valid") {
			valid++
			if err != nil {
				t.Errorf("seed %s: %v", e.Name(), err)
			}
		} else if invalid++; err == nil {
			t.Errorf("seed %s parses, want it rejected", e.Name())
		}
	}
	if valid == 0 || invalid == 0 {
		t.Fatalf("%s holds %d valid and %d invalid seeds, want both kinds", dir, valid, invalid)
	}
}
