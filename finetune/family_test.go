package finetune

import (
	"math"
	"path/filepath"
	"testing"

	"github.com/posttrainllm/posttrainllm/model"
)

// Every family fine-tunes under every method (LoRA, DoRA, full) through
// the compiled weighted step: one trace for the whole run, finite losses,
// and a held-out completion loss that falls.
func TestFamiliesFineTuneEveryMethodInOneTrace(t *testing.T) {
	trainFile := writeCompletions(t, "train.jsonl", 0, 40)
	valid := writeCompletions(t, "valid.jsonl", 100, 10)
	for name, mc := range familyConfigs() {
		base := writeBaseModel(t, mc)
		for _, method := range Methods() {
			t.Run(name+"/"+method, func(t *testing.T) {
				ft := Config{Base: base, Method: method, Train: trainFile, Valid: valid, MaskPrompt: true}
				cfg := fineTuneConfig(6)
				if ft.UsesAdapter() {
					ft.Rank, ft.Alpha, ft.Targets = 4, 8, []string{"all"}
				} else {
					cfg.LR = 3e-3
				}
				sum := runFineTune(t, cfg, ft, filepath.Join(t.TempDir(), "run"), "")
				if sum.Traces != 1 {
					t.Errorf("traced %d times, want 1", sum.Traces)
				}
				if math.IsNaN(sum.Loss) || math.IsInf(sum.Loss, 0) {
					t.Fatalf("final loss %g", sum.Loss)
				}
				if !(sum.ValLoss < sum.InitialValLoss) {
					t.Errorf("held-out completion loss %.4f -> %.4f, want it to fall", sum.InitialValLoss, sum.ValLoss)
				}
			})
		}
	}
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
