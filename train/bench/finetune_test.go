package bench

import (
	"math"
	"strings"
	"testing"

	"github.com/posttrainllm/posttrainllm/finetune"
	"github.com/posttrainllm/posttrainllm/model"
	"github.com/posttrainllm/posttrainllm/peft"
)

// The fine-tune bench traces a compiled step once and an interpreted one
// every update, trains only the adapters' parameters with LoRA, and its
// loss falls on the learnable synthetic stream.
func TestRunFineTuneLoRAAndFull(t *testing.T) {
	ad := peft.Config{Rank: 4, Alpha: 8, Targets: []string{"all"}}
	cfg := benchConfig()
	loraCfg := cfg
	loraCfg.LR, loraCfg.MinLR = 3e-2, 3e-3 // adapters on a random base need a larger rate to move in 12 steps
	lora, err := RunFineTune(loraCfg, FineTune{Method: finetune.MethodLoRA, Adapter: ad}, Options{Label: "unit", Warmup: 2, Steps: 10, Pipelined: true})
	if err != nil {
		t.Fatal(err)
	}
	full, err := RunFineTune(cfg, FineTune{Method: finetune.MethodFull}, Options{Label: "unit", Warmup: 2, Steps: 10})
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
	interp, err := RunFineTune(cfg, FineTune{Method: finetune.MethodDoRA, Adapter: ad}, Options{Warmup: 1, Steps: 2})
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

// The preference bench times the row step of each objective on the same
// shape: one trace, a label naming the objective, a DPO loss that starts
// at ln 2 for fresh adapters, a time and a peak; an odd batch is refused.
// (The synthetic pairs have no preference to learn, so no fall is
// asked for.)
func TestRunFineTunePreference(t *testing.T) {
	ad := peft.Config{Rank: 4, Alpha: 8, Targets: []string{"all"}}
	cfg := benchConfig()
	for _, c := range []struct {
		method string
		obj    finetune.ObjectiveName
	}{{finetune.MethodLoRA, finetune.DPO}, {finetune.MethodFull, finetune.DPO}, {finetune.MethodLoRA, finetune.SimPO}, {finetune.MethodFull, finetune.ORPO}} {
		cc := cfg
		if c.method != finetune.MethodFull {
			cc.LR, cc.MinLR = 3e-2, 3e-3 // adapters on a random base need a larger rate to move
		}
		r, err := RunFineTune(cc, FineTune{Method: c.method, Adapter: ad, Objective: finetune.Preference{Objective: c.obj}}, Options{Label: "unit", Warmup: 2, Steps: 6})
		if err != nil {
			t.Fatalf("%s %s: %v", c.method, c.obj, err)
		}
		if r.Traces != 1 || r.Preset != "unit/"+c.method+"/"+string(c.obj) {
			t.Errorf("%s %s: %d traces, label %q", c.method, c.obj, r.Traces, r.Preset)
		}
		if c.obj == finetune.DPO && c.method == finetune.MethodLoRA && math.Abs(r.LossFirst-math.Ln2) > 1e-5 {
			t.Errorf("fresh LoRA DPO: first loss %g, want ln 2", r.LossFirst)
		}
		if math.IsNaN(r.LossLast) || math.IsInf(r.LossLast, 0) || !(r.MsPerStepMedian > 0) || r.PeakMemoryBytes == 0 {
			t.Errorf("%s %s: last loss %g, %g ms/step, peak %d bytes", c.method, c.obj, r.LossLast, r.MsPerStepMedian, r.PeakMemoryBytes)
		}
	}
	odd := cfg
	odd.Batch = 3
	if _, err := RunFineTune(odd, FineTune{Method: finetune.MethodLoRA, Adapter: ad, Objective: finetune.Preference{Objective: finetune.DPO}}, Options{Steps: 1}); err == nil || !strings.Contains(err.Error(), "even") {
		t.Errorf("odd batch: %v", err)
	}
}
