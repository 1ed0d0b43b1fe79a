package train

import (
	"math"
	"testing"

	"github.com/posttrainllm/posttrainllm/internal/runtest/fixture"
)

// Each family trains through the compiled step with accumulation over two
// microbatches under every optimizer: one trace for the whole run, finite
// losses, and AdamW lowers the loss.
func TestFamiliesTrainCompiledWithAccumulation(t *testing.T) {
	ds := memoryDataset(t, fixture.SyntheticText(4000), 32)
	for name, mc := range fixture.FamilyConfigs() {
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
