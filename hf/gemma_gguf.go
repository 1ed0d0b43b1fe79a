package hf

import (
	_ "embed"
	"fmt"
	"strings"

	"github.com/posttrainllm/posttrainllm/mlx"
)

// gemma3GGUFConfig is the config.json (Gemma3ForCausalLM) of a GGUF file
// of architecture gemma3, from its gemma3.* keys and what llama.cpp
// hard-codes for the architecture: sliding layers five of every six, with
// rotary base 10,000, and query_pre_attn_scalar the head size
// (hidden_size/num_attention_heads for the 62-layer 27B model).
func gemma3GGUFConfig(h *mlx.GGUFHeader) (map[string]any, error) {
	const arch = GGUFGemma3
	var missing []string
	need := func(key string) float64 {
		v, ok := h.Numbers[arch+"."+key]
		if !ok {
			missing = append(missing, arch+"."+key)
		}
		return v
	}
	d, layers, hidden := int(need("embedding_length")), int(need("block_count")), int(need("feed_forward_length"))
	heads, context := int(need("attention.head_count")), int(need("context_length"))
	eps, window := need("attention.layer_norm_rms_epsilon"), int(need("attention.sliding_window"))
	if len(missing) > 0 {
		return nil, fmt.Errorf("metadata %s missing", strings.Join(missing, ", "))
	}
	if heads <= 0 {
		return nil, fmt.Errorf("%s.attention.head_count = %d, want > 0", arch, heads)
	}
	kv := heads
	if v, ok := h.Numbers[arch+".attention.head_count_kv"]; ok {
		kv = int(v)
	}
	hd := d / heads
	if v, ok := h.Numbers[arch+".attention.key_length"]; ok {
		hd = int(v)
	}
	if v, ok := h.Numbers[arch+".attention.value_length"]; ok && int(v) != hd {
		return nil, fmt.Errorf("%s.attention.value_length = %g differs from key_length %d; want them equal", arch, v, hd)
	}
	scalar := float64(hd)
	if layers == 62 {
		scalar = float64(d / heads)
	}
	theta := 1e6
	if v, ok := h.Numbers[arch+".rope.freq_base"]; ok {
		theta = v
	}
	var scaling any
	switch kind := h.Strings[arch+".rope.scaling.type"]; kind {
	case "", "none":
	case "linear":
		f, ok := h.Numbers[arch+".rope.scaling.factor"]
		if !ok {
			return nil, fmt.Errorf("%s.rope.scaling.type linear needs %s.rope.scaling.factor", arch, arch)
		}
		scaling = map[string]any{"rope_type": "linear", "factor": float32Value(f)}
	default:
		return nil, fmt.Errorf("%s.rope.scaling.type %q is not supported; want linear or none", arch, kind)
	}
	vocab := 0
	for _, t := range h.Tensors {
		switch t.Name {
		case "token_embd.weight":
			vocab = t.Shape[0]
		case "output.weight":
			return nil, fmt.Errorf("tensor %q: Gemma 3's head is tied to token_embd", t.Name)
		}
	}
	return map[string]any{
		"architectures": []string{"Gemma3ForCausalLM"}, "model_type": Gemma3,
		"vocab_size": vocab, "hidden_size": d, "intermediate_size": hidden, "num_hidden_layers": layers,
		"num_attention_heads": heads, "num_key_value_heads": kv, "head_dim": hd, "max_position_embeddings": context,
		"rms_norm_eps": float32Value(eps), "rope_theta": float32Value(theta), "rope_local_base_freq": 10000.0,
		"rope_scaling": scaling, "hidden_activation": "gelu_pytorch_tanh", "query_pre_attn_scalar": scalar,
		"sliding_window": window, "sliding_window_pattern": 6, "tie_word_embeddings": true,
		"final_logit_softcapping": nil, "attn_logit_softcapping": nil, "attention_bias": false,
	}, nil
}

// gemma3GGUFName maps a llama.cpp tensor name of a gemma3 file to
// Gemma3ForCausalLM's. llama.cpp stores q and k rows as Hugging Face does
// (Gemma's rotation is rotate-half) and norms as their gains 1 + w.
func gemma3GGUFName(name string) (string, error) {
	switch name {
	case "token_embd.weight":
		return "model.embed_tokens.weight", nil
	case "output_norm.weight":
		return "model.norm.weight", nil
	}
	if m := ggufLayerName.FindStringSubmatch(name); m != nil {
		per := map[string]string{
			"attn_norm.weight": "input_layernorm.weight", "post_attention_norm.weight": "post_attention_layernorm.weight",
			"ffn_norm.weight": "pre_feedforward_layernorm.weight", "post_ffw_norm.weight": "post_feedforward_layernorm.weight",
			"attn_q.weight": "self_attn.q_proj.weight", "attn_k.weight": "self_attn.k_proj.weight",
			"attn_v.weight": "self_attn.v_proj.weight", "attn_output.weight": "self_attn.o_proj.weight",
			"attn_q_norm.weight": "self_attn.q_norm.weight", "attn_k_norm.weight": "self_attn.k_norm.weight",
			"ffn_gate.weight": "mlp.gate_proj.weight", "ffn_up.weight": "mlp.up_proj.weight",
			"ffn_down.weight": "mlp.down_proj.weight",
		}
		if hf, ok := per[m[2]]; ok {
			return "model.layers." + m[1] + "." + hf, nil
		}
	}
	return "", fmt.Errorf("tensor %q is not a parameter of a gemma3 model this import maps", name)
}

// gemma3ChatTemplate is Gemma 3's chat template, as its instruction-tuned
// models' tokenizer_config.json carries it: turns between <start_of_turn>
// and <end_of_turn>, the assistant's role named model, a system message
// put in front of the first user turn. llama.cpp's GGUF files of the base
// models carry none.
//
//go:embed gemma3.jinja
var gemma3ChatTemplate string

// gemma3EndOfTurn is the token that ends each of Gemma's turns, a stop
// token beside <eos> (Gemma 3's generation_config.json lists both).
const gemma3EndOfTurn = "<end_of_turn>"
