package train

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/posttrainllm/posttrainllm/mlx"
)

// countingProbe is a plan probe whose step peaks at 100 bytes per
// sequence of the micro-batch, counting the candidates it runs.
func countingProbe(calls *int) StepProbe {
	return StepProbe{
		LowerBound: func(Config) float64 { return 0 },
		Peak: func(c Config) (uint64, error) {
			*calls++
			return uint64(c.Batch) * 100, nil
		},
		Step: "pretraining",
	}
}

// A probed plan is kept in the cache folder and taken from there, without
// probing, by a run of the same step on the same device and build; any
// change to what the probe measured probes again, and settings that do
// not change the step (length, schedule, data, seed) share the plan.
func TestPlanCacheSkipsTheProbeForTheSameStep(t *testing.T) {
	cfg := tinyConfig()
	cfg.Batch, cfg.Accum = 2, 4
	cfg, _, err := Prepare(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cfg.PlanCache = t.TempDir()
	id := planIdentity{Build: "build 1", MLX: "0.32.4", Device: "NVIDIA H200 sm_90", DeviceMemory: 140 << 30}
	const budget = 450 // 8 sequences peak at 800 bytes, 4 at 400
	calls := 0
	probe := countingProbe(&calls)

	first, err := probePlanCached(cfg, budget, probe, id)
	if err != nil {
		t.Fatal(err)
	}
	if first.MicroBatch != 4 || first.Steps != 2 || first.Cached || calls != 2 || first.CacheError != "" {
		t.Fatalf("first run: %+v after %d probe runs; want 4 × 2 probed, not cached, from 2 candidates", first, calls)
	}
	files, _ := filepath.Glob(filepath.Join(cfg.PlanCache, "*.json"))
	if len(files) != 1 {
		t.Fatalf("the cache folder holds %v; want one plan file", files)
	}

	again, err := probePlanCached(cfg, budget, probe, id)
	if err != nil {
		t.Fatal(err)
	}
	if calls != 2 || !again.Cached || again.MicroBatch != 4 || again.Steps != 2 || again.PeakBytes != 400 ||
		!reflect.DeepEqual(again.Probes, first.Probes) || again.ProbeSeconds != 0 {
		t.Fatalf("second run: %+v after %d probe runs; want the first's plan from the cache without probing", again, calls)
	}

	same := cfg
	same.Steps, same.LR, same.Seed, same.Corpus, same.Warmup, same.LogEvery = 5000, 1, 7, "other.txt", 100, 50
	if p, err := probePlanCached(same, budget, probe, id); err != nil || !p.Cached || calls != 2 {
		t.Fatalf("another length, lr, seed, corpus: %+v, %v, %d probe runs; want the cached plan", p, err, calls)
	}

	for name, edit := range map[string]func(c *Config, id *planIdentity, b *uint64, p *StepProbe){
		"another build":          func(_ *Config, id *planIdentity, _ *uint64, _ *StepProbe) { id.Build = "build 2" },
		"another MLX":            func(_ *Config, id *planIdentity, _ *uint64, _ *StepProbe) { id.MLX = "0.33.0" },
		"another GPU":            func(_ *Config, id *planIdentity, _ *uint64, _ *StepProbe) { id.Device = "NVIDIA H100 sm_90" },
		"another memory size":    func(_ *Config, id *planIdentity, _ *uint64, _ *StepProbe) { id.DeviceMemory = 80 << 30 },
		"another budget":         func(_ *Config, _ *planIdentity, b *uint64, _ *StepProbe) { *b = 500 },
		"another step":           func(_ *Config, _ *planIdentity, _ *uint64, p *StepProbe) { p.Step = "fine-tune" },
		"another batch × accum":  func(c *Config, _ *planIdentity, _ *uint64, _ *StepProbe) { c.Batch, c.Accum = 4, 2 },
		"another model width":    func(c *Config, _ *planIdentity, _ *uint64, _ *StepProbe) { c.Model.DModel = 64 },
		"another optimizer":      func(c *Config, _ *planIdentity, _ *uint64, _ *StepProbe) { c.Optimizer = "lion" },
		"gradient checkpointing": func(c *Config, _ *planIdentity, _ *uint64, _ *StepProbe) { c.GradCheckpoint = true },
	} {
		c, i, b, p := cfg, id, uint64(budget), probe
		edit(&c, &i, &b, &p)
		before := calls
		got, err := probePlanCached(c, b, p, i)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if got.Cached || calls == before {
			t.Errorf("%s: %+v, %d probe runs; want a new probe", name, got, calls-before)
		}
	}

	// A damaged file is a miss: the probe runs and rewrites it.
	for _, f := range mustGlob(t, filepath.Join(cfg.PlanCache, "*.json")) {
		if err := os.WriteFile(f, []byte("{not json"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	before := calls
	if p, err := probePlanCached(cfg, budget, probe, id); err != nil || p.Cached || calls == before {
		t.Fatalf("damaged cache: %+v, %v; want a new probe", p, err)
	}
	if p, err := probePlanCached(cfg, budget, probe, id); err != nil || !p.Cached {
		t.Fatalf("after the damaged file was rewritten: %+v, %v; want the cached plan", p, err)
	}
}

// Without a cache folder every run probes; a folder that cannot be
// written leaves the plan probed and says why it was not kept.
func TestPlanCacheOffAndUnwritable(t *testing.T) {
	cfg := tinyConfig()
	cfg.Batch, cfg.Accum = 2, 2
	cfg, _, err := Prepare(cfg)
	if err != nil {
		t.Fatal(err)
	}
	id := planIdentity{Build: "b", MLX: "m", Device: "d", DeviceMemory: 1}
	calls := 0
	probe := countingProbe(&calls)
	for range 2 {
		if p, err := probePlanCached(cfg, 1000, probe, id); err != nil || p.Cached {
			t.Fatalf("no cache: %+v, %v", p, err)
		}
	}
	if calls != 2 {
		t.Fatalf("no cache: %d probe runs over two plans, want 2", calls)
	}

	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	cfg.PlanCache = filepath.Join(file, "plans")
	p, err := probePlanCached(cfg, 1000, probe, id)
	if err != nil || p.MicroBatch != 4 || p.CacheError == "" || !strings.Contains(p.String(), "not kept: plan cache") {
		t.Fatalf("unwritable cache: %+v (%s), %v; want the probed plan saying it was not kept", p, p, err)
	}
}

func TestPlanCacheFolder(t *testing.T) {
	home := t.TempDir()
	t.Setenv("XDG_CACHE_HOME", home)
	t.Setenv("HOME", home)
	if got := PlanCacheFolder("off"); got != "" {
		t.Errorf(`PlanCacheFolder("off") = %q, want ""`, got)
	}
	if got := PlanCacheFolder("/somewhere"); got != "/somewhere" {
		t.Errorf("PlanCacheFolder(/somewhere) = %q", got)
	}
	want, err := os.UserCacheDir()
	if err != nil {
		t.Fatal(err)
	}
	if got, want := PlanCacheFolder(""), filepath.Join(want, "posttrainllm", "plans"); got != want {
		t.Errorf(`PlanCacheFolder("") = %q, want %q`, got, want)
	}
}

// The identity names this MLX and device, and is the same on every call.
func TestCurrentPlanIdentity(t *testing.T) {
	cfg := tinyConfig()
	var a, b planIdentity
	err := mlx.Do(func() error {
		var err error
		if a, err = currentPlanIdentity(cfg); err != nil {
			return err
		}
		b, err = currentPlanIdentity(cfg)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	v, err := mlx.Version()
	if err != nil {
		t.Fatal(err)
	}
	if a != b || a.MLX != v || a.Build == "" {
		t.Fatalf("identities %+v and %+v; want equal ones naming MLX %s and a build", a, b, v)
	}
}

func mustGlob(t *testing.T, pattern string) []string {
	t.Helper()
	m, err := filepath.Glob(pattern)
	if err != nil || len(m) == 0 {
		t.Fatalf("glob %s: %v, %d files", pattern, err, len(m))
	}
	return m
}
