package finetune

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/posttrainllm/posttrainllm/checkpoint"
	"github.com/posttrainllm/posttrainllm/internal/mlxtest"
	"github.com/posttrainllm/posttrainllm/mlx"
	"github.com/posttrainllm/posttrainllm/model"
	"github.com/posttrainllm/posttrainllm/train"
)

// writeBase saves a freshly initialised tinyConfig model as a checkpoint
// and returns its directory.
func writeBase(t testing.TB) string {
	t.Helper()
	return writeBaseModel(t, tinyConfig().Model)
}

// writeBaseModel is writeBase with the model mc.
func writeBaseModel(t testing.TB, mc model.Config) string {
	t.Helper()
	c := tinyConfig()
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

// writeCompletions writes "continue this line" records made from the
// synthetic text: the first words of a line as the prompt, the rest as
// the completion.
func writeCompletions(t testing.TB, name string, skip, n int) string {
	t.Helper()
	lines := strings.Split(syntheticText(20_000), "\n")
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

func fineTuneConfig(steps int) train.Config {
	cfg := tinyConfig()
	cfg.Steps, cfg.Batch, cfg.Accum = steps, 2, 4
	cfg.LR, cfg.MinLR, cfg.Warmup = 1e-2, 1e-3, 2
	cfg.EvalEvery, cfg.LogEvery = steps, 1
	return cfg
}

func runFineTune(t testing.TB, cfg train.Config, ft Config, dir, resume string) train.Summary {
	t.Helper()
	f, err := New(cfg, ft, dir)
	if err != nil {
		t.Fatal(err)
	}
	sum, err := f.Run(context.Background(), resume)
	if err != nil {
		t.Fatal(err)
	}
	return sum
}

func fileBytes(t testing.TB, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A LoRA fine-tune with a cosine schedule and 4 accumulated microbatches
// traces once, lowers the held-out completion loss, leaves the base
// checkpoint as it was, writes small adapter checkpoints without a model
// file, and resumes exactly: 3 updates, then 3 more from the checkpoint,
// give the adapters and losses of 6 updates in one go.
func TestFineTuneLoRATracesOnceLearnsAndResumesExactly(t *testing.T) {
	base := writeBase(t)
	baseModel := fileBytes(t, filepath.Join(base, checkpoint.ModelFile))
	ft := Config{Base: base, Method: MethodLoRA, Rank: 4, Alpha: 8, Targets: []string{"attn", "mlp"},
		Train: writeCompletions(t, "train.jsonl", 0, 40), Valid: writeCompletions(t, "valid.jsonl", 100, 10), MaskPrompt: true}

	whole := filepath.Join(t.TempDir(), "whole")
	sum := runFineTune(t, fineTuneConfig(6), ft, whole, "")
	if sum.Traces != 1 {
		t.Errorf("traced %d times, want 1", sum.Traces)
	}
	if !(sum.ValLoss < sum.InitialValLoss) {
		t.Errorf("held-out completion loss %.4f -> %.4f, want it to fall", sum.InitialValLoss, sum.ValLoss)
	}
	if !bytes.Equal(baseModel, fileBytes(t, filepath.Join(base, checkpoint.ModelFile))) {
		t.Error("the base checkpoint changed")
	}
	ck := sum.LastCheckpoint
	if _, err := os.Stat(filepath.Join(ck, checkpoint.ModelFile)); err == nil {
		t.Errorf("LoRA checkpoint %s holds a model file", ck)
	}
	if a, b := len(fileBytes(t, filepath.Join(ck, checkpoint.AdapterFile))), len(baseModel); a*4 > b {
		t.Errorf("adapter file is %d bytes, the base %d; want it far smaller", a, b)
	}

	// The same run, interrupted after its third update and resumed.
	split := filepath.Join(t.TempDir(), "split")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	f, err := New(fineTuneConfig(6), ft, split)
	if err != nil {
		t.Fatal(err)
	}
	f.Hooks.OnLog = func(m train.Metrics) {
		if m.Step == 3 {
			cancel()
		}
	}
	part, err := f.Run(ctx, "")
	if !errors.Is(err, train.ErrInterrupted) || part.Step != 3 {
		t.Fatalf("interrupted run: step %d, error %v; want step 3 and ErrInterrupted", part.Step, err)
	}
	resumed := runFineTune(t, fineTuneConfig(6), ft, split, part.LastCheckpoint)
	if resumed.StartStep != 3 || resumed.Step != 6 {
		t.Fatalf("resumed steps %d-%d, want 3-6", resumed.StartStep, resumed.Step)
	}
	if resumed.Loss != sum.Loss || resumed.ValLoss != sum.ValLoss {
		t.Errorf("resumed run ends at loss %v, held-out %v; the whole run at %v, %v", resumed.Loss, resumed.ValLoss, sum.Loss, sum.ValLoss)
	}
	mlxtest.Run(t, func(t testing.TB) {
		a, _, err := mlx.LoadSafetensors(filepath.Join(sum.LastCheckpoint, checkpoint.AdapterFile))
		if err != nil {
			t.Fatal(err)
		}
		b, _, err := mlx.LoadSafetensors(filepath.Join(resumed.LastCheckpoint, checkpoint.AdapterFile))
		if err != nil {
			t.Fatal(err)
		}
		if len(a) != len(b) || len(a) == 0 {
			t.Fatalf("%d and %d adapter arrays", len(a), len(b))
		}
		for name, x := range a {
			xv, _ := x.Float32s()
			yv, err := b[name].Float32s()
			if err != nil || !slices.Equal(xv, yv) {
				t.Errorf("adapter %s differs after resuming (%v)", name, err)
			}
		}
	})
}

// A checkpoint resumes only into the fine-tune it belongs to, and a base
// given as a run folder means its newest checkpoint.
func TestFineTuneResumeRefusesOtherAdapters(t *testing.T) {
	base := writeBase(t)
	ft := Config{Base: filepath.Dir(filepath.Dir(base)), Method: MethodLoRA, Rank: 4, Alpha: 8, Targets: []string{"attn"},
		Train: writeCompletions(t, "train.jsonl", 0, 20), MaskPrompt: true}
	cfg := fineTuneConfig(3)
	cfg.EvalEvery = 0
	dir := filepath.Join(t.TempDir(), "run")
	sum := runFineTune(t, cfg, ft, dir, "")
	ft.Rank = 2
	cfg.Steps = 6
	f, err := New(cfg, ft, dir)
	if err != nil {
		t.Fatal(err)
	}
	if f.FineTune.Base != base {
		t.Errorf("base %s resolved to %s, want %s", ft.Base, f.FineTune.Base, base)
	}
	_, err = f.Run(context.Background(), sum.LastCheckpoint)
	if err == nil || !strings.Contains(err.Error(), "is a lora fine-tune (rank 4") {
		t.Errorf("resuming rank-4 adapters as rank 2: error %v", err)
	}
}
