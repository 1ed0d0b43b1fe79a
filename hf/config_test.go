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

// fields of the other Llama-shaped families: 4 heads of 8 over 32 wide.
const ropeFields = `"vocab_size":300,"hidden_size":32,"intermediate_size":64,` +
	`"num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2,"max_position_embeddings":64`

const gpt2Fields = `"model_type":"gpt2","vocab_size":300,"n_embd":32,"n_layer":1,"n_head":4,"n_positions":64`

// Each config.json field that asks for something the model cannot compute
// is refused with an error naming it.
func TestParseConfigNamesUnsupportedFields(t *testing.T) {
	for _, c := range []struct{ json, field string }{
		{`{` + llamaFields + `,"quantization_config":{"bits":4}}`, "quantization_config"},
		{`{` + llamaFields + `,"quantization":{"group_size":64}}`, "quantization"},
		{`{"model_type":"qwen3_moe"}`, `model_type "qwen3_moe"`},
		{`{}`, "model_type"},
		{`{` + llamaFields + `,"rope_scaling":{"type":"dynamic","factor":2}}`, "rope_scaling"},
		{`{` + llamaFields + `,"rope_scaling":{"rope_type":"linear","factor":0}}`, "rope_scaling factor"},
		{`{` + llamaFields + `,"mlp_bias":true}`, "mlp_bias"},
		{`{` + llamaFields + `,"head_dim":-2}`, "head_dim = -2"},
		{`{` + llamaFields + `,"rope_scaling":{"rope_type":"yarn","factor":4}}`, `rope_scaling type "yarn"`},
		{`{` + llamaFields + `,"rope_scaling":{"rope_type":"llama3","factor":8,"low_freq_factor":1,"high_freq_factor":4}}`,
			"original_max_position_embeddings"},
		{`{` + llamaFields + `,"rope_scaling":{"rope_type":"llama3","factor":8,"low_freq_factor":4,"high_freq_factor":1,"original_max_position_embeddings":16}}`,
			"high_freq_factor = 1"},
		{`{"model_type":"gemma3_text",` + ropeFields + `,"final_logit_softcapping":30.0}`, "final_logit_softcapping"},
		{`{"model_type":"gemma3_text",` + ropeFields + `,"hidden_activation":"gelu"}`, "hidden_activation"},
		{`{"model_type":"gemma3_text",` + ropeFields + `,"num_hidden_layers":3,"layer_types":["sliding_attention","full_attention","full_attention"]}`, "layer_types[2]"},
		{`{"model_type":"qwen2",` + ropeFields + `,"use_sliding_window":true,"sliding_window":16,"max_window_layers":1}`, "sliding_window = 16"},
		{`{"model_type":"qwen3",` + ropeFields + `,"use_sliding_window":true,"sliding_window":16,"layer_types":["full_attention","sliding_attention"]}`,
			"sliding_window = 16"},
		{`{"model_type":"phi3",` + ropeFields + `,"rope_scaling":{"type":"longrope","short_factor":[1],"long_factor":[2]}}`, `rope_scaling type "longrope"`},
		{`{"model_type":"phi3",` + ropeFields + `,"partial_rotary_factor":0.5}`, "partial_rotary_factor"},
		{`{"model_type":"phi3",` + ropeFields + `,"head_dim":16}`, "head_dim = 16"},
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
		t.Fatalf("Family of a TinyGPT-family model: %v, want an error saying it is neither family", err)
	}
}

// Each Llama-shaped family maps its own defaults and layout: Qwen2's q/k/v
// biases whatever attention_bias says, Qwen3's q/k norms and default
// head_dim of 128, attention_bias as q, k, v and o biases for Llama and
// Qwen3, Mistral's 8 key/value heads by default and sliding windows that
// never bind; Family recognises each result as its family.
func TestParseConfigMapsRopeFamilies(t *testing.T) {
	for _, c := range []struct {
		json, family string
		check        func(model.Config) bool
	}{
		{`{"model_type":"qwen2",` + ropeFields + `,"tie_word_embeddings":true,"sliding_window":32,"use_sliding_window":false}`, Qwen2,
			func(c model.Config) bool {
				return c.QKVBias && !c.OutBias && !c.QKNorm && c.TiedEmbeddings && c.HeadDim() == 8
			}},
		{`{"model_type":"qwen2",` + ropeFields + `,"attention_bias":false}`, Qwen2,
			func(c model.Config) bool { return c.QKVBias && !c.OutBias }},
		{`{"model_type":"qwen3",` + ropeFields + `}`, Qwen3,
			func(c model.Config) bool { return c.QKNorm && !c.QKVBias && c.HeadDim() == 128 && !c.TiedEmbeddings }},
		{`{"model_type":"qwen3",` + ropeFields + `,"head_dim":16,"attention_bias":true}`, Qwen3,
			func(c model.Config) bool { return c.QKNorm && c.QKVBias && c.OutBias && c.HeadDimension == 16 }},
		{`{"model_type":"llama",` + ropeFields + `,"attention_bias":true,"head_dim":12,` +
			`"rope_scaling":{"rope_type":"llama3","factor":32,"low_freq_factor":1,"high_freq_factor":4,"original_max_position_embeddings":16}}`, Llama,
			func(c model.Config) bool {
				return c.QKVBias && c.OutBias && c.HeadDimension == 12 && c.RoPEType == model.RoPELlama3 && c.RoPEFactor == 32 &&
					c.RoPELowFreqFactor == 1 && c.RoPEHighFreqFactor == 4 && c.RoPEOriginalContext == 16 && c.RoPEScale == 0
			}},
		{`{"model_type":"llama",` + ropeFields + `,"head_dim":8,"rope_scaling":{"rope_type":"default"}}`, Llama,
			func(c model.Config) bool { return c.HeadDimension == 0 && c.RoPEType == "" && c.RoPEScale == 0 }},
		{`{"model_type":"mistral","vocab_size":300,"hidden_size":64,"intermediate_size":64,"num_hidden_layers":2,"num_attention_heads":16,` +
			`"max_position_embeddings":64,"attention_bias":true}`, Mistral,
			func(c model.Config) bool { return c.KVHeads == 8 && !c.QKVBias && !c.OutBias && c.NormEps == 1e-6 }},
		{`{"model_type":"mistral",` + ropeFields + `,"sliding_window":null}`, Mistral, func(c model.Config) bool { return true }},
		{`{"model_type":"mistral",` + ropeFields + `,"sliding_window":64}`, Mistral, func(c model.Config) bool { return c.SlidingWindow == 0 }},
		{`{"model_type":"mistral",` + ropeFields + `,"sliding_window":32}`, Mistral, func(c model.Config) bool { return c.SlidingWindow == 32 }},
		// Absent, Mistral's sliding_window is transformers' default, 4096.
		{`{"model_type":"mistral","vocab_size":300,"hidden_size":32,"intermediate_size":64,"num_hidden_layers":2,"num_attention_heads":8,` +
			`"max_position_embeddings":8192}`, Mistral, func(c model.Config) bool { return c.SlidingWindow == 4096 && c.LayerWindow(1) == 4096 }},
		{`{"model_type":"gemma3_text",` + ropeFields + `,"num_hidden_layers":7,"sliding_window":16,"rope_scaling":{"rope_type":"linear","factor":8}}`, Gemma3,
			func(c model.Config) bool {
				return c.MLP == model.MLPGeGLU && c.GELU == model.GELUTanh && c.QKNorm && c.PostNorms && c.EmbedScale && c.TiedEmbeddings &&
					c.HeadDim() == 256 && c.QueryScale == 256 && c.RoPEBase == 1e6 && c.RoPELocalBase == 10000 && c.RoPEScale == 8 &&
					c.LayerWindow(0) == 16 && c.LayerWindow(5) == 0 && c.LayerWindow(6) == 16 && c.NormEps == 1e-6
			}},
		{`{"model_type":"gemma3_text",` + ropeFields + `,"layer_types":["sliding_attention","full_attention"],"head_dim":8,"query_pre_attn_scalar":8}`, Gemma3,
			func(c model.Config) bool {
				return c.SlidingPattern == 2 && c.LayerWindow(0) == 4096 && c.LayerWindow(1) == 0
			}},
		{`{"model_type":"phi3",` + ropeFields + `,"sliding_window":2047,"max_position_embeddings":2047,"rope_scaling":null}`, Phi3,
			func(c model.Config) bool { return c.NormEps == 1e-5 && !c.QKVBias && c.Context == 2047 }},
	} {
		cfg, family, err := ParseConfig([]byte(c.json), "")
		if err != nil {
			t.Errorf("%s: %v", c.json, err)
			continue
		}
		if family != c.family || cfg.Family != c.family || !c.check(cfg) {
			t.Errorf("%s: mapped to %s %+v", c.json, family, cfg)
		}
		if f, err := Family(cfg); err != nil || f != c.family {
			t.Errorf("%s: Family of the mapped config: %q, %v; want %q", c.json, f, err, c.family)
		}
	}
}

// Export refuses a config its family's transformers class cannot
// express, naming the field; without a family it infers one.
func TestFamilyRefusesWhatTheClassCannotExpress(t *testing.T) {
	base := model.Config{VocabSize: 300, DModel: 32, Layers: 1, Heads: 4, Context: 16, MLPHidden: 64,
		Norm: model.NormRMS, MLP: model.MLPSwiGLU}
	for _, c := range []struct {
		mutate func(*model.Config)
		want   string
	}{
		{func(c *model.Config) { c.Family = Qwen2 }, "q/k/v biases"},
		{func(c *model.Config) { c.Family, c.QKVBias = Llama, true }, "attention_bias covers q, k, v and o"},
		{func(c *model.Config) { c.Family, c.QKVBias, c.OutBias = Mistral, true, true }, "no attention biases"},
		{func(c *model.Config) { c.Family, c.HeadDimension = Phi3, 16 }, "head_dim = d_model/heads"},
		{func(c *model.Config) { c.Family, c.RoPEScale = Phi3, 2 }, "no rope scaling"},
		{func(c *model.Config) { c.Family = Qwen3 }, "qk_norm"},
		{func(c *model.Config) { c.Family = GPT2 }, "not a Llama-shaped family"},
		{func(c *model.Config) { c.Bias = true }, "bias = false"},
	} {
		cfg := base
		c.mutate(&cfg)
		if _, err := Family(cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want an error saying %q", cfg, err, c.want)
		}
	}
	for _, c := range []struct {
		mutate func(*model.Config)
		want   string
	}{
		{func(c *model.Config) {}, Llama},
		{func(c *model.Config) { c.QKVBias = true }, Qwen2},
		{func(c *model.Config) { c.QKNorm = true }, Qwen3},
		{func(c *model.Config) { c.QKVBias, c.OutBias = true, true }, Llama},
	} {
		cfg := base
		c.mutate(&cfg)
		if f, err := Family(cfg); err != nil || f != c.want {
			t.Errorf("%+v: family %q, %v; want %q", cfg, f, err, c.want)
		}
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
