package presets

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/posttrainllm/posttrainllm/train"
)

func TestAllPresetsLoadAndValidate(t *testing.T) {
	prev := 0
	for _, name := range Names() {
		cfg, err := Load(name)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if err := cfg.Validate(); err != nil {
			t.Fatalf("%s does not validate: %v", name, err)
		}
		n := cfg.Model.NumParams()
		if n <= prev {
			t.Fatalf("%s has %d parameters, not more than the preset before it (%d): Names must be ordered by size", name, n, prev)
		}
		prev = n
		if cfg.Tokenizer == "gpt2" && cfg.Model.VocabSize != 50257 {
			t.Fatalf("%s: gpt2 tokenizer with vocab_size %d, want 50257", name, cfg.Model.VocabSize)
		}
		if cfg.Tokenizer == "byte" && cfg.Model.VocabSize != 256 {
			t.Fatalf("%s: byte tokenizer with vocab_size %d, want 256", name, cfg.Model.VocabSize)
		}
		if !cfg.Compile {
			t.Fatalf("%s: presets run the compiled step", name)
		}
	}
}

// The issue fixes huge: 12 layers, d_model 256, context 512, batch 4 ×
// accum 4, cosine, bf16, AdamW, GPT-2 vocabulary, about 22M parameters.
func TestHugePreset(t *testing.T) {
	cfg, err := Load("huge")
	if err != nil {
		t.Fatal(err)
	}
	m := cfg.Model
	if m.Layers != 12 || m.DModel != 256 || m.Context != 512 {
		t.Fatalf("huge is %d layers, d_model %d, context %d; want 12, 256, 512", m.Layers, m.DModel, m.Context)
	}
	if cfg.Batch != 4 || cfg.Accum != 4 || cfg.Schedule != "cosine" || cfg.Optimizer != "adamw" ||
		m.Dtype != "bfloat16" || cfg.Tokenizer != "gpt2" || !m.TiedEmbeddings {
		t.Fatalf("huge: batch %d accum %d schedule %s optimizer %s dtype %s tokenizer %s tied %t",
			cfg.Batch, cfg.Accum, cfg.Schedule, cfg.Optimizer, m.Dtype, cfg.Tokenizer, m.TiedEmbeddings)
	}
	if n := m.NumParams(); n < 21_500_000 || n > 23_000_000 {
		t.Fatalf("huge has %d parameters, want about 22M (21.5M–23M)", n)
	}
}

// tiny must train in seconds on two CPU cores: a byte-level model of a
// couple of layers.
func TestTinyPresetIsSmall(t *testing.T) {
	cfg, err := Load("tiny")
	if err != nil {
		t.Fatal(err)
	}
	m := cfg.Model
	if cfg.Tokenizer != "byte" || m.Layers > 4 || m.DModel > 128 || m.Context > 128 || cfg.Device != "cpu" {
		t.Fatalf("tiny is %+v with tokenizer %s on %s", m, cfg.Tokenizer, cfg.Device)
	}
}

func TestLoadUnknownPresetListsNames(t *testing.T) {
	_, err := Load("gigantic")
	if err == nil {
		t.Fatal("unknown preset accepted")
	}
	for _, want := range append([]string{`"gigantic"`}, Names()...) {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("error %q does not mention %s", err, want)
		}
	}
	if _, err := Load("../presets/tiny"); err == nil {
		t.Fatal("a path was accepted as a preset name")
	}
}

func TestParseRejectsBadPresets(t *testing.T) {
	base := `{"model":{"vocab_size":256,"d_model":16,"layers":1,"heads":2,"context":8},"steps":5,"batch":2,"lr":0.001`
	if _, err := Parse([]byte(base + `}`)); err != nil {
		t.Fatalf("minimal preset rejected: %v", err)
	}
	cases := map[string]string{
		"unknown field":   base + `,"colour":"blue"}`,
		"trailing data":   base + `} {}`,
		"unknown optim":   base + `,"optimizer":"adam"}`,
		"unknown sched":   base + `,"schedule":"linear"}`,
		"warmup >= steps": base + `,"warmup":5}`,
		"negative lr":     `{"model":{"vocab_size":256,"d_model":16,"layers":1,"heads":2,"context":8},"steps":5,"batch":2,"lr":-1}`,
		"vocab too small": base + `,"tokenizer":"gpt2"}`,
		"no vocab":        `{"model":{"d_model":16,"layers":1,"heads":2,"context":8},"steps":5,"batch":2,"lr":0.001}`,
		"not json":        `steps: 5`,
	}
	for name, js := range cases {
		if _, err := Parse([]byte(js)); err == nil {
			t.Errorf("%s: accepted %s", name, js)
		}
	}
}

// A preset file written for an older build gives eval_batches; it loads as
// the tokens those batches covered.
func TestParseAcceptsOldEvalBatches(t *testing.T) {
	base := `{"model":{"vocab_size":256,"d_model":16,"layers":1,"heads":2,"context":8},"steps":5,"batch":2,"lr":0.001`
	cfg, err := Parse([]byte(base + `,"eval_batches":3}`))
	if err != nil {
		t.Fatalf("a preset with eval_batches: %v", err)
	}
	if cfg.EvalTokens != 3*2*8 {
		t.Fatalf("eval_batches 3 of batch 2 × context 8 gave eval_tokens %d, want 48", cfg.EvalTokens)
	}
	if _, err := Parse([]byte(base + `,"eval_batches":3,"eval_tokens":48}`)); err == nil {
		t.Fatal("a preset giving both eval_batches and eval_tokens was accepted")
	}
}

// FuzzParsePreset: Parse never panics, and what it accepts validates and
// survives a marshal/parse round trip unchanged.
func FuzzParsePreset(f *testing.F) {
	for _, name := range Names() {
		b, err := files.ReadFile(name + ".json")
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		cfg, err := Parse(b)
		if err != nil {
			return
		}
		if err := cfg.Validate(); err != nil {
			t.Fatalf("accepted preset does not validate: %v", err)
		}
		js, err := json.Marshal(cfg)
		if err != nil {
			t.Fatalf("accepted preset does not marshal: %v", err)
		}
		again, err := Parse(js)
		if err != nil {
			t.Fatalf("re-marshalled preset rejected: %v\n%s", err, js)
		}
		if !reflect.DeepEqual(cfg, again) {
			t.Fatalf("round trip changed the preset:\n%+v\n%+v", cfg, again)
		}
	})
}

// Presets are complete: every field is written out, so a preset file says
// exactly what runs and WithDefaults changes nothing. The one exception is
// eval_tokens, which a preset gives only when it needs another size of
// evaluation than train.DefaultEvalTokens, the size measured to give
// held-out losses that agree from one sample of windows to another.
func TestPresetFilesAreComplete(t *testing.T) {
	for _, name := range Names() {
		b, _ := files.ReadFile(name + ".json")
		var raw train.Config
		if err := json.Unmarshal(b, &raw); err != nil {
			t.Fatal(err)
		}
		if raw.EvalTokens == 0 {
			raw.EvalTokens = train.DefaultEvalTokens
		}
		if !reflect.DeepEqual(raw, raw.WithDefaults()) {
			t.Errorf("%s.json leaves fields to defaults:\n%+v\n%+v", name, raw, raw.WithDefaults())
		}
	}
}
