package finetune

import (
	"math"
	"path/filepath"
	"testing"

	"github.com/posttrainllm/posttrainllm/internal/runtest"
	"github.com/posttrainllm/posttrainllm/internal/runtest/fixture"
)

// Every family fine-tunes under every method (LoRA, DoRA, full) through
// the compiled weighted step: one trace for the whole run, finite losses,
// and a held-out completion loss that falls.
func TestFamiliesFineTuneEveryMethodInOneTrace(t *testing.T) {
	trainFile := runtest.WriteCompletions(t, "train.jsonl", 0, 40)
	valid := runtest.WriteCompletions(t, "valid.jsonl", 100, 10)
	for name, mc := range fixture.FamilyConfigs() {
		base := runtest.WriteBaseModel(t, mc)
		for _, method := range Methods() {
			t.Run(name+"/"+method, func(t *testing.T) {
				ft := Config{Base: base, Method: method, Train: trainFile, Valid: valid, MaskPrompt: true}
				cfg := runtest.FineTuneConfig(6)
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
