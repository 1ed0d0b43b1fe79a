package finetune

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/posttrainllm/posttrainllm/checkpoint"
	"github.com/posttrainllm/posttrainllm/internal/mlxtest"
	"github.com/posttrainllm/posttrainllm/internal/runtest"
	"github.com/posttrainllm/posttrainllm/peft"
	"github.com/posttrainllm/posttrainllm/train"
)

// loraSettings are a request's settings of a LoRA fine-tune on train.
func loraSettings(train string) Config {
	return Config{Train: train, Method: MethodLoRA, Rank: 8, Alpha: 16, Targets: []string{"attn"}, MaskPrompt: true,
		Objective: SFT}
}

// wantSettingErr fails unless err is a *SettingError of setting (with
// with, when not "").
func wantSettingErr(t *testing.T, what string, err error, setting, with string) {
	t.Helper()
	var se *SettingError
	if !errors.As(err, &se) {
		t.Errorf("%s: %v, want a SettingError of %s", what, err, setting)
		return
	}
	if se.Setting != setting || (with != "" && se.With != with) {
		t.Errorf("%s: refused %s (with %q): %v; want %s with %q", what, se.Setting, se.With, err, setting, with)
	}
}

// A fresh plan starts from Defaults over the base, keeps the settings
// given with absolute paths, and refuses what is missing, a context
// beyond the base's, GRPO's settings for another objective, epochs with
// steps and epochs <= 0.
func TestNewPlanFresh(t *testing.T) {
	base := runtest.WriteBase(t)
	trainFile := runtest.WriteCompletions(t, "train.jsonl", 0, 8)
	req := Request{From: base, Settings: loraSettings(trainFile)}
	p, err := NewPlan(req)
	if err != nil {
		t.Fatal(err)
	}
	if p.Checkpoint != "" || p.FineTune.Objective != "" || p.FineTune.Train != trainFile || !filepath.IsAbs(p.FineTune.Base) {
		t.Errorf("plan %+v: want a fresh sft fine-tune of %s on %s", p, base, trainFile)
	}
	if want := Defaults(runtest.TinyConfig(), MethodLoRA); p.Run.Steps != want.Steps || p.Run.LR != DefaultAdapterLR {
		t.Errorf("run %+v: want the defaults over the base", p.Run)
	}
	for _, c := range []struct {
		what          string
		edit          func(r *Request)
		setting, with string
	}{
		{"no base", func(r *Request) { r.From = "" }, "base", ""},
		{"no data", func(r *Request) { r.Settings.Train = "" }, "train", ""},
		{"missing data", func(r *Request) { r.Settings.Train = filepath.Join(t.TempDir(), "none.jsonl") }, "train", ""},
		{"context beyond the base's", func(r *Request) { r.Settings.Context = runtest.TinyConfig().Model.Context + 1 }, "context", ""},
		{"context 0 set", func(r *Request) { r.Set = []string{"context"} }, "context", ""},
		{"grpo setting for sft", func(r *Request) { r.Settings.GroupSize, r.Set = 4, []string{"group_size"} }, "group_size", "objective sft"},
		{"epochs with steps", func(r *Request) { r.Epochs, r.EpochsSet, r.StepsSet = 2, true, true }, "epochs", "steps"},
		{"epochs 0", func(r *Request) { r.EpochsSet = true }, "epochs", ""},
	} {
		r := req
		r.Settings.Targets = append([]string(nil), req.Settings.Targets...)
		c.edit(&r)
		_, err := NewPlan(r)
		wantSettingErr(t, c.what, err, c.setting, c.with)
	}
}

// Epochs derive the steps: the plan carries them, and SetEpochs makes
// them ceil(epochs × sequences / (batch × accum × ranks)).
func TestNewPlanEpochsDeriveSteps(t *testing.T) {
	base := runtest.WriteBase(t)
	trainFile := runtest.WriteCompletions(t, "train.jsonl", 0, 10)
	p, err := NewPlan(Request{From: base, Settings: loraSettings(trainFile), Epochs: 3, EpochsSet: true})
	if err != nil {
		t.Fatal(err)
	}
	if p.Epochs != 3 {
		t.Fatalf("plan epochs %g, want 3", p.Epochs)
	}
	cfg := p.Run
	cfg.Batch, cfg.Accum = 2, 2
	f, err := New(cfg, p.FineTune, filepath.Join(t.TempDir(), "run"))
	if err != nil {
		t.Fatal(err)
	}
	n := f.Train.Len()
	steps, err := f.SetEpochs(p.Epochs, 1, false)
	if want := (3*n + 3) / 4; err != nil || steps != want || f.Config.Steps != want {
		t.Errorf("3 epochs of %d sequences, 4 per update: %d steps (config %d), %v; want %d", n, steps, f.Config.Steps, err, want)
	}
	if f.Config.Warmup >= f.Config.Steps {
		t.Errorf("warm-up %d not fitted to %d steps", f.Config.Warmup, f.Config.Steps)
	}
}

// A resume keeps the fine-tune's settings: one that changes the
// objective or the method, another optimizer or epochs is refused; the
// same settings resume the checkpoint, which needs steps left to run.
func TestNewPlanResume(t *testing.T) {
	base := runtest.WriteBase(t)
	trainFile := runtest.WriteCompletions(t, "train.jsonl", 0, 16)
	run := filepath.Join(t.TempDir(), "run")
	ft := loraSettings(trainFile)
	ft.Base, ft.Objective = base, ""
	cfg := runtest.FineTuneConfig(2)
	cfg.EvalEvery, cfg.Warmup = 0, 1
	runFineTune(t, cfg, ft, run, "")
	req := Request{Resume: run, From: base, Settings: loraSettings(trainFile), Set: []string{"base", "train", "method", "rank", "objective"}}
	p, err := NewPlan(req)
	if err != nil {
		t.Fatal(err)
	}
	if p.Checkpoint == "" || p.Step != 2 || p.FineTune.Method != MethodLoRA || p.Run.Optimizer != cfg.Optimizer {
		t.Errorf("resume plan %+v: want the step-2 checkpoint and its settings", p)
	}
	wantSettingErr(t, "resume at its last step", p.CheckRun(p.Run), "steps", "")
	more := p.Run
	more.Steps = 3
	if err := p.CheckRun(more); err != nil {
		t.Errorf("resume to step 3: %v", err)
	}
	for _, c := range []struct {
		what          string
		edit          func(r *Request)
		setting, with string
	}{
		{"another objective", func(r *Request) { r.Settings.Objective = DPO }, "objective", "resume"},
		{"another method", func(r *Request) { r.Settings.Method = MethodFull }, "method", "resume"},
		{"another rank", func(r *Request) { r.Settings.Rank = 4 }, "rank", "resume"},
		{"another optimizer", func(r *Request) { r.Optimizer = "muon" }, "optimizer", ""},
		{"epochs", func(r *Request) { r.Epochs, r.EpochsSet = 1, true }, "epochs", "resume"},
	} {
		r := req
		c.edit(&r)
		_, err := NewPlan(r)
		wantSettingErr(t, c.what, err, c.setting, c.with)
	}
	// A setting not given is not compared.
	r := req
	r.Set, r.Settings.Method = nil, MethodFull
	if _, err := NewPlan(r); err != nil {
		t.Errorf("resume without its settings given: %v", err)
	}
}

// A quantized base takes adapters, but a full fine-tune or quantize over
// it is refused, naming the quantization.
func TestNewPlanQuantizedBase(t *testing.T) {
	c := runtest.TinyConfig()
	trainFile := runtest.WriteCompletions(t, "train.jsonl", 0, 8)
	var base string
	mlxtest.Run(t, func(t testing.TB) {
		cfg, m, err := train.Prepare(c)
		if err != nil {
			t.Fatal(err)
		}
		params, err := m.Init(11)
		if err != nil {
			t.Fatal(err)
		}
		q, frozen, err := peft.QuantizeBase(m.Specs, params, 32, 4)
		if err != nil {
			t.Fatal(err)
		}
		if base, err = train.SaveCheckpoint(checkpoint.Root(filepath.Join(t.TempDir(), "qbase")), train.RunState{Config: cfg}, q.Names(), frozen, nil, nil); err != nil {
			t.Fatal(err)
		}
	})
	if q, err := CheckpointQuantization(base); err != nil || q != "4-bit, groups of 32" {
		t.Fatalf("CheckpointQuantization: %q, %v; want 4-bit, groups of 32", q, err)
	}
	if _, err := NewPlan(Request{From: base, Settings: loraSettings(trainFile)}); err != nil {
		t.Errorf("adapters over a quantized base: %v", err)
	}
	full := Request{From: base, Settings: loraSettings(trainFile)}
	full.Settings.Method = MethodFull
	_, err := NewPlan(full)
	wantSettingErr(t, "method full over a quantized base", err, "method", "")
	if err != nil && !strings.Contains(err.Error(), "4-bit, groups of 32") {
		t.Errorf("method full over a quantized base: %v does not name the quantization", err)
	}
	quant := Request{From: base, Settings: loraSettings(trainFile)}
	quant.Settings.Quantize = 8
	_, err = NewPlan(quant)
	wantSettingErr(t, "quantize over a quantized base", err, "quantize", "")
}
