// Package runtest holds the test helpers shared by the tests of train,
// pretrain, finetune and runfolder that build on train: the tiny run
// configuration, a prepared setup and its losses, a saved base checkpoint
// and fine-tuning data. It imports train, so train's own tests cannot use
// it; the helpers that need nothing from train are in
// internal/runtest/fixture, which they can. Helpers that need finetune
// stay with runfolder's tests, since finetune's tests could not import
// them.
package runtest

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/posttrainllm/posttrainllm/checkpoint"
	"github.com/posttrainllm/posttrainllm/data"
	"github.com/posttrainllm/posttrainllm/internal/runtest/fixture"
	"github.com/posttrainllm/posttrainllm/mlx"
	"github.com/posttrainllm/posttrainllm/model"
	"github.com/posttrainllm/posttrainllm/step"
	"github.com/posttrainllm/posttrainllm/train"
)

// TinyConfig is a run small enough for unit tests on two CPU cores (train's
// tests, which cannot import this package, have the same).
func TinyConfig() train.Config {
	return train.Config{
		Model:     model.Config{VocabSize: 256, DModel: 32, Layers: 2, Heads: 2, Context: 32},
		Tokenizer: "byte",
		Steps:     20, Batch: 4, Accum: 1,
		Optimizer: "adamw", Schedule: "cosine", LR: 3e-3, MinLR: 3e-4, Warmup: 5,
		GradClip: 1, Compile: true, Device: "cpu", Seed: 1,
		LogEvery: 1, EvalTokens: 256, // 2 batches
	}
}

// FineTuneConfig is TinyConfig for a fine-tune of steps updates: two
// rows a microbatch, four microbatches an update, a higher learning rate
// and one evaluation at the end.
func FineTuneConfig(steps int) train.Config {
	cfg := TinyConfig()
	cfg.Steps, cfg.Batch, cfg.Accum = steps, 2, 4
	cfg.LR, cfg.MinLR, cfg.Warmup = 1e-2, 1e-3, 2
	cfg.EvalEvery, cfg.LogEvery = steps, 1
	return cfg
}

// PreparedSetup prepares cfg and returns a fresh setup of it, its model
// and the prepared config; the setup is freed when the test ends.
func PreparedSetup(t testing.TB, cfg train.Config) (*train.Setup, *model.Transformer, train.Config) {
	t.Helper()
	cfg, m, err := train.Prepare(cfg)
	if err != nil {
		t.Fatal(err)
	}
	s, err := train.NewSetup(cfg, m, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Free)
	return s, m, cfg
}

// SetupLosses runs cfg.Steps updates of a fresh setup of cfg on windows of
// view drawn with cfg.Seed, following cfg's schedule, and returns their
// losses and how often the step was traced.
func SetupLosses(t testing.TB, cfg train.Config, view data.View) (losses []float64, traces int) {
	t.Helper()
	s, _, cfg := PreparedSetup(t, cfg)
	defer s.Free() // now, not when the test ends (freeing twice is a no-op)
	sampler, err := data.NewSampler(view, cfg.Model.Context, cfg.Seed)
	if err != nil {
		t.Fatal(err)
	}
	batch, err := s.Plan.NewBatch(cfg.Model.Context)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < cfg.Steps; i++ {
		if err := sampler.FillBatch(batch); err != nil {
			t.Fatal(err)
		}
		loss, err := s.State.Update(s.Schedule.LR(i), step.BatchOf(batch))
		if err != nil {
			t.Fatalf("update %d: %v", i+1, err)
		}
		losses = append(losses, loss)
	}
	return losses, s.Step.Traces()
}

// WriteBase saves a freshly initialised TinyConfig model as a checkpoint
// and returns its directory.
func WriteBase(t testing.TB) string {
	t.Helper()
	return WriteBaseModel(t, TinyConfig().Model)
}

// WriteBaseModel is WriteBase with the model mc: TinyConfig's run with
// mc's model, initialised with seed 11, saved with a fresh optimizer
// state under the test's temporary directory.
func WriteBaseModel(t testing.TB, mc model.Config) string {
	t.Helper()
	c := TinyConfig()
	c.Model = mc
	cfg, m, err := train.Prepare(c)
	if err != nil {
		t.Fatal(err)
	}
	params, err := m.Init(11)
	if err != nil {
		t.Fatal(err)
	}
	opt, err := train.NewOptimizer(cfg, m.Specs)
	if err != nil {
		t.Fatal(err)
	}
	state, err := opt.Init()
	if err != nil {
		t.Fatal(err)
	}
	names := make([]string, len(m.Specs))
	for i, s := range m.Specs {
		names[i] = s.Name
	}
	dir, err := train.SaveCheckpoint(checkpoint.Root(filepath.Join(t.TempDir(), "base")), train.RunState{Config: cfg}, names, params, opt.StateNames(), state)
	if err != nil {
		t.Fatal(err)
	}
	mlx.Free(params...)
	mlx.Free(state...)
	return dir
}

// WriteCompletions writes n "continue this line" records, from line skip
// of the synthetic text on, to the file name in a temporary directory and
// returns its path: the first words of a line as the prompt, the rest as
// the completion.
func WriteCompletions(t testing.TB, name string, skip, n int) string {
	t.Helper()
	lines := strings.Split(fixture.SyntheticText(20_000), "\n")
	var b bytes.Buffer
	for _, l := range lines[skip : skip+n] {
		cut := strings.Index(l[min(8, len(l)):], " ") + min(8, len(l))
		rec, _ := json.Marshal(map[string]string{"prompt": l[:cut+1], "completion": l[cut+1:] + "\n"})
		b.Write(append(rec, '\n'))
	}
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}
