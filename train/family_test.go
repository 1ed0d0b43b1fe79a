package train

import (
	"math"
	"testing"

	"github.com/posttrainllm/posttrainllm/model"
)

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

// Each family trains through the compiled step with accumulation over two
// microbatches under every optimizer: one trace for the whole run, finite
// losses, and AdamW lowers the loss.
func TestFamiliesTrainCompiledWithAccumulation(t *testing.T) {
	ds := memoryDataset(t, syntheticText(4000), 32)
	for name, mc := range familyConfigs() {
		for _, opt := range []string{"adamw", "lion", "adafactor", "muon", "sgd"} {
			t.Run(name+"/"+opt, func(t *testing.T) {
				cfg := tinyConfig()
				cfg.Model = mc
				cfg.Optimizer, cfg.Accum, cfg.Steps, cfg.Warmup = opt, 2, 6, 1
				losses, traces := setupLosses(t, cfg, ds)
				if traces != 1 {
					t.Fatalf("traced %d times, want 1", traces)
				}
				for i, l := range losses {
					if math.IsNaN(l) || math.IsInf(l, 0) {
						t.Fatalf("loss %d is %g", i, l)
					}
				}
				if opt == "adamw" && !(losses[len(losses)-1] < losses[0]) {
					t.Fatalf("losses %v: AdamW did not lower the loss", losses)
				}
			})
		}
	}
}
