package runfolder

// Copies of finetune's and train's test helpers, which a test of this
// package cannot import.

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/posttrainllm/posttrainllm/checkpoint"
	"github.com/posttrainllm/posttrainllm/finetune"
	"github.com/posttrainllm/posttrainllm/mlx"
	"github.com/posttrainllm/posttrainllm/model"
	"github.com/posttrainllm/posttrainllm/peft"
	"github.com/posttrainllm/posttrainllm/step"
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

func runFineTune(t testing.TB, cfg train.Config, ft finetune.Config, dir, resume string) train.Summary {
	t.Helper()
	f, err := finetune.New(cfg, ft, dir)
	if err != nil {
		t.Fatal(err)
	}
	sum, err := f.Run(context.Background(), resume)
	if err != nil {
		t.Fatal(err)
	}
	return sum
}

// tinyConfig is a run small enough for unit tests on two CPU cores.
func tinyConfig() train.Config {
	return train.Config{
		Model:     model.Config{VocabSize: 256, DModel: 32, Layers: 2, Heads: 2, Context: 32},
		Tokenizer: "byte",
		Steps:     20, Batch: 4, Accum: 1,
		Optimizer: "adamw", Schedule: "cosine", LR: 3e-3, MinLR: 3e-4, Warmup: 5,
		GradClip: 1, Compile: true, Device: "cpu", Seed: 1,
		LogEvery: 1, EvalTokens: 256, // 2 batches
	}
}

// fullLoss is SFT's loss of a full fine-tune of m.
func fullLoss(m *model.Transformer) step.Loss {
	return finetune.SupervisedObjective{}.Loss(finetune.Policy{Model: m})
}

// adapterLoss is SFT's loss of fine-tuning m through adapter a.
func adapterLoss(m *model.Transformer, a *peft.Adapter) step.Loss {
	return finetune.SupervisedObjective{}.Loss(finetune.Policy{Model: m, Adapter: a})
}

// familyConfigs are small models of each family: every family-level
// choice away from the defaults (the TinyGPT family's). GPT-2; Llama with linearly scaled
// RoPE; Llama 3 with its scaled frequencies, a head width other than
// d_model/heads and attention biases; Qwen2 with q/k/v biases; Qwen3 with
// per-head q/k norms and its own head width; Gemma 3 with sliding layers
// (a window of 8 within the context of 32) between global ones, post-norms,
// a GeGLU MLP and scaled, tied embeddings. (Mistral and Phi-3 compute
// what Llama does but for Mistral's window, which Gemma's covers.)
func familyConfigs() map[string]model.Config {
	llama := model.Config{VocabSize: 256, DModel: 32, Layers: 2, Heads: 4, KVHeads: 2, Context: 32, MLPHidden: 40,
		Norm: model.NormRMS, MLP: model.MLPSwiGLU, RoPEBase: 500000}
	llama3, qwen2, qwen3 := llama, llama, llama
	llama.RoPEScale = 2
	llama3.HeadDimension, llama3.QKVBias, llama3.OutBias, llama3.Family = 12, true, true, "llama"
	llama3.RoPEType, llama3.RoPEFactor, llama3.RoPELowFreqFactor, llama3.RoPEHighFreqFactor, llama3.RoPEOriginalContext = model.RoPELlama3, 8, 1, 4, 16
	qwen2.QKVBias, qwen2.TiedEmbeddings, qwen2.RoPEBase, qwen2.Family = true, true, 1e6, "qwen2"
	qwen3.QKNorm, qwen3.HeadDimension, qwen3.TiedEmbeddings, qwen3.RoPEBase, qwen3.Family = true, 16, true, 1e6, "qwen3"
	return map[string]model.Config{
		"gpt2": {VocabSize: 256, DModel: 32, Layers: 2, Heads: 2, Context: 32, TiedEmbeddings: true,
			Norm: model.NormLayer, Bias: true, Positions: model.PositionsLearned, GELU: model.GELUTanh},
		"llama": llama, "llama3": llama3, "qwen2": qwen2, "qwen3": qwen3,
		"gemma3": {VocabSize: 256, DModel: 32, Layers: 3, Heads: 4, KVHeads: 1, HeadDimension: 16, Context: 32, MLPHidden: 40,
			Norm: model.NormRMS, MLP: model.MLPGeGLU, GELU: model.GELUTanh, RoPEBase: 1e6, RoPELocalBase: 10000,
			SlidingWindow: 8, SlidingPattern: 3, QKNorm: true, PostNorms: true, EmbedScale: true, TiedEmbeddings: true,
			QueryScale: 16, Family: "gemma3_text"},
	}
}

// syntheticText is deterministic, learnable text: repeated phrases with
// some variety, enough for a tiny model's loss to fall quickly.
func syntheticText(n int) string {
	words := []string{"the", "quick", "brown", "fox", "jumps", "over", "a", "lazy", "dog", "and", "runs", "home"}
	var b strings.Builder
	for i := 0; b.Len() < n; i++ {
		b.WriteString(words[(i*7+i/5)%len(words)])
		if i%9 == 8 {
			b.WriteString(".\n")
		} else {
			b.WriteByte(' ')
		}
	}
	return b.String()
}
