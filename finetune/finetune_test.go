package finetune

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/posttrainllm/posttrainllm/checkpoint"
	"github.com/posttrainllm/posttrainllm/internal/mlxtest"
	"github.com/posttrainllm/posttrainllm/internal/runtest"
	"github.com/posttrainllm/posttrainllm/mlx"
	"github.com/posttrainllm/posttrainllm/train"
)

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
	base := runtest.WriteBase(t)
	baseModel := fileBytes(t, filepath.Join(base, checkpoint.ModelFile))
	ft := Config{Base: base, Method: MethodLoRA, Rank: 4, Alpha: 8, Targets: []string{"attn", "mlp"},
		Train: runtest.WriteCompletions(t, "train.jsonl", 0, 40), Valid: runtest.WriteCompletions(t, "valid.jsonl", 100, 10), MaskPrompt: true}

	whole := filepath.Join(t.TempDir(), "whole")
	sum := runFineTune(t, runtest.FineTuneConfig(6), ft, whole, "")
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
	f, err := New(runtest.FineTuneConfig(6), ft, split)
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
	resumed := runFineTune(t, runtest.FineTuneConfig(6), ft, split, part.LastCheckpoint)
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
	base := runtest.WriteBase(t)
	ft := Config{Base: filepath.Dir(filepath.Dir(base)), Method: MethodLoRA, Rank: 4, Alpha: 8, Targets: []string{"attn"},
		Train: runtest.WriteCompletions(t, "train.jsonl", 0, 20), MaskPrompt: true}
	cfg := runtest.FineTuneConfig(3)
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
