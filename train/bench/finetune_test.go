package bench

import (
	"strings"
	"testing"

	"github.com/posttrainllm/posttrainllm/model"
	"github.com/posttrainllm/posttrainllm/peft"
	"github.com/posttrainllm/posttrainllm/train"
)

// The fine-tune bench traces a compiled step once and an interpreted one
// every update, trains only the adapters' parameters with LoRA, and its
// loss falls on the learnable synthetic stream.
func TestRunFineTuneLoRAAndFull(t *testing.T) {
	ad := peft.Config{Rank: 4, Alpha: 8, Targets: []string{"all"}}
	cfg := benchConfig()
	loraCfg := cfg
	loraCfg.LR, loraCfg.MinLR = 3e-2, 3e-3 // adapters on a random base need a larger rate to move in 12 steps
	lora, err := RunFineTune(loraCfg, FineTune{Method: train.MethodLoRA, Adapter: ad}, Options{Label: "unit", Warmup: 2, Steps: 10, Pipelined: true})
	if err != nil {
		t.Fatal(err)
	}
	full, err := RunFineTune(cfg, FineTune{Method: train.MethodFull}, Options{Label: "unit", Warmup: 2, Steps: 10})
	if err != nil {
		t.Fatal(err)
	}
	if !(lora.PipelinedMsPerStep > 0) || full.PipelinedMsPerStep != 0 {
		t.Errorf("pipelined ms per step: lora %g (asked for), full %g (not asked for)", lora.PipelinedMsPerStep, full.PipelinedMsPerStep)
	}
	if lora.Traces != 1 || full.Traces != 1 {
		t.Errorf("compiled fine-tune steps traced %d (lora) and %d (full) times, want 1", lora.Traces, full.Traces)
	}
	if lora.Preset != "unit/lora" || full.Preset != "unit/full" {
		t.Errorf("labels %q and %q", lora.Preset, full.Preset)
	}
	m, err := model.New(cfg.Model)
	if err != nil {
		t.Fatal(err)
	}
	ad.Method = peft.LoRA
	a, err := peft.New(ad, m.Specs)
	if err != nil {
		t.Fatal(err)
	}
	if lora.Params != a.NumParams() || full.Params != cfg.WithDefaults().Model.NumParams() {
		t.Errorf("trainable params: lora %d, full %d (model %d)", lora.Params, full.Params, cfg.WithDefaults().Model.NumParams())
	}
	for _, r := range []Result{lora, full} {
		if !(r.LossLast < r.LossFirst) {
			t.Errorf("%s: loss %g -> %g, want a fall", r.Preset, r.LossFirst, r.LossLast)
		}
	}
	cfg.Compile = false
	interp, err := RunFineTune(cfg, FineTune{Method: train.MethodDoRA, Adapter: ad}, Options{Warmup: 1, Steps: 2})
	if err != nil {
		t.Fatal(err)
	}
	if interp.Traces != 3 {
		t.Errorf("interpreted DoRA step ran its body %d times over 3 updates, want 3", interp.Traces)
	}
	if _, err := RunFineTune(cfg, FineTune{Method: "qlora"}, Options{Steps: 1}); err == nil || !strings.Contains(err.Error(), "qlora") {
		t.Errorf("method qlora: error %v", err)
	}
}
