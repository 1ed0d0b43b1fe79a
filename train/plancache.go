package train

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"time"

	"github.com/posttrainllm/posttrainllm/mlx"
)

// A probed plan costs a trace, MLX's compilation and two updates per
// candidate: seconds on a warm GPU, a minute on a cold one. The plan cache
// keeps each probed plan in a file of Config.PlanCache named by what the
// probe depends on (planKey), so a run of the same step on the same device
// with the same build takes the plan without probing. Anything else (another
// shape, optimizer, budget, GPU, its memory, MLX or posttrainllm build)
// names another file, and the probe runs.

// planIdentity is what a probed plan depends on beyond the run's settings:
// the posttrainllm build that measured it, MLX's version and the device.
type planIdentity struct {
	Build        string `json:"build"`
	MLX          string `json:"mlx"`
	Device       string `json:"device"` // name and architecture
	DeviceMemory uint64 `json:"device_memory_bytes"`
}

// planKey is everything a probed plan depends on: the identity, the
// budget, the kind of step probed and the settings that shape that step.
type planKey struct {
	planIdentity
	Budget uint64 `json:"memory_budget_bytes"`
	// Step names the step the probe measured: pretraining, or the
	// fine-tune's settings (StepProbe.step).
	Step   string `json:"step"`
	Config Config `json:"config"` // stepSettings of the run's config
}

// planCacheEntry is the content of a plan cache file: the key it was
// probed under (checked on reading, so a file is only ever taken for its
// own key) and the plan.
type planCacheEntry struct {
	Key  planKey `json:"key"`
	Plan Plan    `json:"plan"`
}

// PlanCacheDir is the plan cache of this user, a folder of CacheDir.
func PlanCacheDir() (string, error) {
	dir, err := CacheDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, "plans"), nil
}

// stepSettings is cfg without the settings that do not change the step a
// probe measures (data, length of the run, schedule, seed, logging,
// checkpoints), so runs that differ only in those share a plan.
func stepSettings(cfg Config) Config {
	c := cfg
	c.Tokenizer, c.Corpus, c.ValFraction, c.Data, c.ValData, c.BPEDropout = "", "", 0, "", "", 0
	c.Steps, c.Schedule, c.LR, c.MinLR, c.Warmup, c.DecayFraction = 0, "", 0, 0, 0, 0
	c.Seed, c.LogEvery, c.EvalEvery, c.EvalTokens = 0, 0, 0, 0
	c.CheckpointEvery, c.KeepCheckpoints, c.PrefetchDepth = 0, 0, 0
	c.PlanCache = ""
	return c
}

// currentPlanIdentity is the identity of this process's build, its MLX
// and cfg's device. It runs on the MLX thread.
func currentPlanIdentity(cfg Config) (planIdentity, error) {
	id := planIdentity{Build: buildIdentity()}
	var err error
	if id.MLX, err = mlx.Version(); err != nil {
		return id, err
	}
	dev, err := mlx.ParseDevice(cfg.Device)
	if err != nil {
		return id, err
	}
	name, arch, err := dev.Describe()
	if err != nil {
		return id, err
	}
	id.Device = name + " " + arch
	if id.DeviceMemory, err = dev.Memory(); err != nil {
		return id, err
	}
	return id, nil
}

// buildIdentity names the running posttrainllm build: its module version
// and VCS revision where the build recorded them, and the executable's
// size and modification time, which tell apart builds of one revision
// with uncommitted changes.
func buildIdentity() string {
	s := "unknown build"
	if info, ok := debug.ReadBuildInfo(); ok {
		s = info.Main.Path + "@" + info.Main.Version
		for _, kv := range info.Settings {
			if kv.Key == "vcs.revision" || kv.Key == "vcs.modified" {
				s += " " + kv.Key + "=" + kv.Value
			}
		}
	}
	if exe, err := os.Executable(); err == nil {
		if fi, err := os.Stat(exe); err == nil {
			s += fmt.Sprintf(" executable %d bytes %s", fi.Size(), fi.ModTime().UTC().Format(time.RFC3339Nano))
		}
	}
	return s
}

// path returns the file of dir that holds the plan of k.
func (k planKey) path(dir string) (string, error) {
	b, err := json.Marshal(k)
	if err != nil {
		return "", fmt.Errorf("plan cache: %w", err)
	}
	sum := sha256.Sum256(b)
	return filepath.Join(dir, hex.EncodeToString(sum[:12])+".json"), nil
}

// probePlanCached is ProbeStepPlan through the plan cache of cfg.PlanCache
// ("" probes every time), for a device of identity id: a plan cached for
// the same key is returned without probing (Plan.Cached); otherwise the
// probe runs and its plan is written to the cache. A cache that cannot be
// read is a miss; one that cannot be written is reported in
// Plan.CacheError, and the run goes on with the plan it probed.
func probePlanCached(cfg Config, budget uint64, probe StepProbe, id planIdentity) (Plan, error) {
	start := time.Now()
	if cfg.PlanCache == "" {
		p, err := ProbeStepPlan(cfg, budget, probe)
		p.ProbeSeconds = time.Since(start).Seconds()
		return p, err
	}
	key := planKey{planIdentity: id, Budget: budget, Step: probe.Step, Config: stepSettings(cfg)}
	path, err := key.path(cfg.PlanCache)
	if err != nil {
		return Plan{}, err
	}
	if p, ok := readCachedPlan(path, key, cfg.Batch*cfg.Accum); ok {
		p.Cached, p.ProbeSeconds, p.CacheError = true, 0, ""
		return p, nil
	}
	p, err := ProbeStepPlan(cfg, budget, probe)
	p.ProbeSeconds = time.Since(start).Seconds()
	if err != nil {
		return p, err
	}
	if err := writeCachedPlan(path, planCacheEntry{Key: key, Plan: p}); err != nil {
		p.CacheError = err.Error()
	}
	return p, nil
}

// readCachedPlan returns the plan in file path if the file holds one for
// key whose micro-batches cover seqs sequences per update.
func readCachedPlan(path string, key planKey, seqs int) (Plan, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Plan{}, false
	}
	var e planCacheEntry
	if err := json.Unmarshal(b, &e); err != nil {
		return Plan{}, false
	}
	want, err1 := json.Marshal(key)
	got, err2 := json.Marshal(e.Key)
	p := e.Plan
	if err1 != nil || err2 != nil || string(want) != string(got) ||
		p.How != PlanProbed || p.MicroBatch < 1 || p.Steps < 1 || p.MicroBatch*p.Steps != seqs {
		return Plan{}, false
	}
	return p, true
}

// writeCachedPlan writes e to path through a temporary file renamed into
// place, so a reader (another rank, another run) never sees half a file.
func writeCachedPlan(path string, e planCacheEntry) error {
	b, err := json.MarshalIndent(e, "", "  ")
	if err != nil {
		return fmt.Errorf("plan cache: %w", err)
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("plan cache: %w", err)
	}
	f, err := os.CreateTemp(dir, ".plan-*")
	if err != nil {
		return fmt.Errorf("plan cache: %w", err)
	}
	_, err = f.Write(append(b, '\n'))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("plan cache: %w", err)
	}
	return nil
}

// PlanCacheFolder resolves a plan cache setting (the --plan-cache flag):
// "" is the user's (PlanCacheDir; none when the user has no cache
// directory), "off" none, so every run probes, and anything else that
// folder.
func PlanCacheFolder(setting string) string {
	switch setting {
	case "off":
		return ""
	case "":
		dir, err := PlanCacheDir()
		if err != nil {
			return ""
		}
		return dir
	}
	return setting
}
