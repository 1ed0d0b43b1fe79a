package train

import (
	"math"
	"testing"

	"github.com/posttrainllm/posttrainllm/model"
)

// familyConfigs are small GPT-2-like and Llama-like models: every
// family-level choice away from TinyGPT's defaults.
func familyConfigs() map[string]model.Config {
	return map[string]model.Config{
		"gpt2": {VocabSize: 256, DModel: 32, Layers: 2, Heads: 2, Context: 32, TiedEmbeddings: true,
			Norm: model.NormLayer, Bias: true, Positions: model.PositionsLearned, GELU: model.GELUTanh},
		"llama": {VocabSize: 256, DModel: 32, Layers: 2, Heads: 4, KVHeads: 2, Context: 32, MLPHidden: 40,
			Norm: model.NormRMS, MLP: model.MLPSwiGLU, RoPEBase: 500000, RoPEScale: 2},
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
