package hf

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/posttrainllm/posttrainllm/mlx"
	"github.com/posttrainllm/posttrainllm/model"
)

const llamaFields = `"model_type":"llama","vocab_size":300,"hidden_size":32,"intermediate_size":64,` +
	`"num_hidden_layers":1,"num_attention_heads":4,"max_position_embeddings":64`

const gpt2Fields = `"model_type":"gpt2","vocab_size":300,"n_embd":32,"n_layer":1,"n_head":4,"n_positions":64`

// Each config.json field that asks for something the model cannot compute
// is refused with an error naming it.
func TestParseConfigNamesUnsupportedFields(t *testing.T) {
	for _, c := range []struct{ json, field string }{
		{`{` + llamaFields + `,"quantization_config":{"bits":4}}`, "quantization_config"},
		{`{` + llamaFields + `,"quantization":{"group_size":64}}`, "quantization"},
		{`{"model_type":"mistral"}`, `model_type "mistral"`},
		{`{}`, "model_type"},
		{`{` + llamaFields + `,"rope_scaling":{"type":"dynamic","factor":2}}`, "rope_scaling"},
		{`{` + llamaFields + `,"rope_scaling":{"rope_type":"linear","factor":0}}`, "rope_scaling factor"},
		{`{` + llamaFields + `,"attention_bias":true}`, "attention_bias"},
		{`{` + llamaFields + `,"mlp_bias":true}`, "mlp_bias"},
		{`{` + llamaFields + `,"head_dim":16}`, "head_dim"},
		{`{` + llamaFields + `,"hidden_act":"gelu"}`, "hidden_act"},
		{`{` + llamaFields + `,"num_key_value_heads":3}`, "kv_heads"},
		{`{` + gpt2Fields + `,"activation_function":"relu"}`, "activation_function"},
		{`{` + gpt2Fields + `,"scale_attn_by_inverse_layer_idx":true}`, "scale_attn_by_inverse_layer_idx"},
		{`{` + gpt2Fields + `,"tie_word_embeddings":false}`, "tie_word_embeddings"},
		{`{` + gpt2Fields + `,"n_head":5}`, "heads"},
	} {
		_, _, err := ParseConfig([]byte(c.json), "")
		if err == nil || !strings.Contains(err.Error(), c.field) {
			t.Errorf("%s: error %v, want one naming %s", c.json, err, c.field)
		}
	}
}

// Supported configs map onto the family's fields, and Family recognises
// the result for export.
func TestParseConfigMapsFamilies(t *testing.T) {
	cfg, family, err := ParseConfig([]byte(`{`+llamaFields+`,"num_key_value_heads":2,"rope_theta":500000,"rope_scaling":{"rope_type":"linear","factor":4}}`), "bfloat16")
	if err != nil {
		t.Fatal(err)
	}
	if family != Llama || cfg.KVHeads != 2 || cfg.RoPEBase != 500000 || cfg.RoPEScale != 4 || cfg.Hidden() != 64 ||
		cfg.MLP != model.MLPSwiGLU || cfg.TiedEmbeddings || cfg.Dtype != "bfloat16" {
		t.Fatalf("llama config mapped to %s %+v", family, cfg)
	}
	if f, err := Family(cfg); err != nil || f != Llama {
		t.Fatalf("Family of the mapped llama config: %q, %v", f, err)
	}
	cfg, family, err = ParseConfig([]byte(`{`+gpt2Fields+`,"activation_function":"gelu_new"}`), "")
	if err != nil {
		t.Fatal(err)
	}
	if family != GPT2 || cfg.GELU != model.GELUTanh || !cfg.Bias || cfg.Norm != model.NormLayer ||
		cfg.Positions != model.PositionsLearned || !cfg.TiedEmbeddings || cfg.Hidden() != 128 {
		t.Fatalf("gpt2 config mapped to %s %+v", family, cfg)
	}
	if f, err := Family(cfg); err != nil || f != GPT2 {
		t.Fatalf("Family of the mapped gpt2 config: %q, %v", f, err)
	}
	tiny := model.Config{VocabSize: 256, DModel: 32, Layers: 1, Heads: 4, Context: 16}
	if _, err := Family(tiny); err == nil || !strings.Contains(err.Error(), "neither GPT-2") {
		t.Fatalf("Family of a TinyGPT: %v, want an error saying it is neither family", err)
	}
}

// Weights that are not float arrays (a quantized checkpoint's integers)
// and tensors of the wrong shape are refused, naming the tensor.
func TestLoadRefusesBadTensors(t *testing.T) {
	write := func(t *testing.T, arrays map[string]*mlx.Array) string {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, ConfigFile), []byte(`{`+llamaFields+`}`), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := mlx.SaveSafetensors(filepath.Join(dir, WeightsFile), arrays, nil); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	q := write(t, map[string]*mlx.Array{"model.embed_tokens.weight": mlx.Zeros([]int{300, 8}, mlx.Uint32)})
	if _, err := Load(q, ""); err == nil || !strings.Contains(err.Error(), `"model.embed_tokens.weight"`) ||
		!strings.Contains(err.Error(), "quantized") {
		t.Errorf("integer weights: %v, want an error naming the tensor and saying quantized", err)
	}
	s := write(t, map[string]*mlx.Array{"model.embed_tokens.weight": mlx.Zeros([]int{300, 16}, mlx.Float32)})
	if _, err := Load(s, ""); err == nil || !strings.Contains(err.Error(), "is missing") {
		t.Errorf("a folder lacking tensors: %v, want an error naming a missing tensor", err)
	}
}
