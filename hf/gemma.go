package hf

import (
	"encoding/json"
	"fmt"

	"github.com/posttrainllm/posttrainllm/mlx"
	"github.com/posttrainllm/posttrainllm/model"
)

// gemma3Config maps Gemma3ForCausalLM's configuration (model_type
// gemma3_text), with Gemma3TextConfig's defaults for absent fields: q/k
// RMSNorms, norms before and after attention and the MLP, a GELU-tanh
// gated MLP, embeddings scaled by √hidden_size, a tied head, and sliding
// layers (rope_local_base_freq, unscaled rotation) interleaved with global
// ones (rope_theta, rope_scaling) as layer_types or sliding_window_pattern
// says.
func gemma3Config(h hfConfig) (model.Config, error) {
	switch {
	case h.HiddenActivation != "" && h.HiddenActivation != "gelu_pytorch_tanh":
		return model.Config{}, fmt.Errorf("hidden_activation %q is not supported; want gelu_pytorch_tanh", h.HiddenActivation)
	case !isNullJSON(h.FinalLogitSoftcapping):
		return model.Config{}, fmt.Errorf("final_logit_softcapping = %s is not supported; want null", h.FinalLogitSoftcapping)
	case !isNullJSON(h.AttnLogitSoftcapping):
		return model.Config{}, fmt.Errorf("attn_logit_softcapping = %s is not supported; want null", h.AttnLogitSoftcapping)
	case orDefault(h.AttentionBias, false):
		return model.Config{}, fmt.Errorf("attention_bias = true is not supported")
	case h.IntermediateSize <= 0:
		return model.Config{}, fmt.Errorf("intermediate_size = %d, want > 0", h.IntermediateSize)
	case h.NumAttentionHeads <= 0:
		return model.Config{}, fmt.Errorf("num_attention_heads = %d, want > 0", h.NumAttentionHeads)
	}
	cfg := model.Config{
		VocabSize: h.VocabSize, DModel: h.HiddenSize, Layers: h.NumHiddenLayers, Heads: h.NumAttentionHeads,
		Context: h.MaxPositionEmbeddings, MLPRatio: 4, MLPHidden: h.IntermediateSize,
		TiedEmbeddings: orDefault(h.TieEmbeddings, true), NormEps: orDefault(h.RMSNormEps, 1e-6),
		RoPEBase: orDefault(h.RoPETheta, 1e6), Norm: model.NormRMS, Positions: model.PositionsRoPE,
		MLP: model.MLPGeGLU, GELU: model.GELUTanh, QKNorm: true, PostNorms: true, EmbedScale: true,
		HeadDimension: orDefault(h.HeadDim, 256), QueryScale: orDefault(h.QueryPreAttnScalar, 256),
		RoPELocalBase: orDefault(h.RoPELocalBaseFreq, 10000),
	}
	if h.MaxPositionEmbeddings == 0 {
		cfg.Context = 131072
	}
	cfg.KVHeads = orDefault(h.NumKeyValueHeads, 4)
	if cfg.KVHeads == cfg.Heads {
		cfg.KVHeads = 0
	}
	if err := ropeScalingConfig(h, ropeFamily{ropeScaling: true}, &cfg); err != nil {
		return model.Config{}, err
	}
	if cfg.RoPEType != "" {
		return model.Config{}, fmt.Errorf("rope_scaling type %q is not supported for gemma3_text; want linear or none", cfg.RoPEType)
	}
	window := 4096
	if len(h.SlidingWindow) > 0 {
		var w *int
		if err := json.Unmarshal(h.SlidingWindow, &w); err != nil || w == nil || *w <= 0 {
			return model.Config{}, fmt.Errorf("sliding_window = %s, want a positive integer", h.SlidingWindow)
		}
		window = *w
	}
	cfg.SlidingWindow = window
	cfg.SlidingPattern = orDefault(h.SlidingWindowPattern, 6)
	if len(h.LayerTypes) > 0 {
		p, err := slidingPattern(h.LayerTypes, h.NumHiddenLayers)
		if err != nil {
			return model.Config{}, err
		}
		cfg.SlidingPattern = p
	}
	if cfg.SlidingPattern <= 0 {
		return model.Config{}, fmt.Errorf("sliding_window_pattern = %d, want > 0", cfg.SlidingPattern)
	}
	return cfg, nil
}

// slidingPattern is the n for which layer_types lists every (n)th layer
// as full_attention and the others as sliding_attention, as Gemma 3's
// sliding_window_pattern lays them out.
func slidingPattern(types []string, layers int) (int, error) {
	if len(types) != layers {
		return 0, fmt.Errorf("layer_types lists %d layers, num_hidden_layers is %d", len(types), layers)
	}
	n := len(types) + 1 // no full layer: every layer sliding while (l+1) < n
	for l, t := range types {
		if t == "full_attention" {
			n = l + 1
			break
		}
	}
	for l, t := range types {
		want := "sliding_attention"
		if (l+1)%n == 0 {
			want = "full_attention"
		}
		if t != want {
			return 0, fmt.Errorf("layer_types[%d] = %q: the layers are not one full_attention layer every %d, which is the pattern supported", l, t, n)
		}
	}
	return n, nil
}

func isNullJSON(raw json.RawMessage) bool { return len(raw) == 0 || string(raw) == "null" }

// gemma3Norms are a Gemma 3 layer's norms: model name, Hugging Face name.
var gemma3Norms = [][2]string{
	{"attn_norm", "input_layernorm"}, {"attn_post_norm", "post_attention_layernorm"},
	{"mlp_norm", "pre_feedforward_layernorm"}, {"mlp_post_norm", "post_feedforward_layernorm"},
	{"attn.q_norm", "self_attn.q_norm"}, {"attn.k_norm", "self_attn.k_norm"},
}

// gemma3ToParams maps Gemma 3's tensors into out. Gemma's RMSNorm
// multiplies by (1 + w) and stores w: the model's gains are 1 + w,
// computed in float32 as transformers does, unless gains says the norm
// tensors hold the gains already (a GGUF file: llama.cpp adds the one when
// it converts).
func gemma3ToParams(cfg model.Config, t tensors, out map[string]*mlx.Array, take func(string) *mlx.Array, gains bool) {
	gain := func(a *mlx.Array) *mlx.Array {
		if a == nil || gains {
			return a
		}
		return mlx.Add(mlx.AsType(a, mlx.Float32), mlx.Scalar(1, mlx.Float32))
	}
	out["tok_embeddings.weight"] = take("model.embed_tokens.weight")
	for i := range cfg.Layers {
		h, p := fmt.Sprintf("model.layers.%d.", i), fmt.Sprintf("blocks.%d.", i)
		for _, n := range gemma3Norms {
			out[p+n[0]+".weight"] = gain(take(h + n[1] + ".weight"))
		}
		for _, n := range ropeProjections {
			out[p+n[0]+".weight"] = take(h + n[1] + ".weight")
		}
	}
	out["norm.weight"] = gain(take("model.norm.weight"))
	delete(t, "lm_head.weight") // tied; some files store the copy
}

// gemma3FromParams is gemma3ToParams reversed: norms stored as gain − 1.
func gemma3FromParams(cfg model.Config, p, out map[string]*mlx.Array, vocab func(*mlx.Array) *mlx.Array) {
	w := func(g *mlx.Array) *mlx.Array {
		return mlx.AsType(mlx.Subtract(mlx.AsType(g, mlx.Float32), mlx.Scalar(1, mlx.Float32)), g.Dtype())
	}
	out["model.embed_tokens.weight"] = vocab(p["tok_embeddings.weight"])
	for i := range cfg.Layers {
		h, b := fmt.Sprintf("model.layers.%d.", i), fmt.Sprintf("blocks.%d.", i)
		for _, n := range gemma3Norms {
			out[h+n[1]+".weight"] = w(p[b+n[0]+".weight"])
		}
		for _, n := range ropeProjections {
			out[h+n[1]+".weight"] = p[b+n[0]+".weight"]
		}
	}
	out["model.norm.weight"] = w(p["norm.weight"])
}

// gemma3ExportConfig is the config.json of a Gemma3ForCausalLM for cfg.
func gemma3ExportConfig(cfg model.Config) map[string]any {
	types := make([]string, cfg.Layers)
	for l := range types {
		types[l] = "full_attention"
		if cfg.LayerWindow(l) > 0 {
			types[l] = "sliding_attention"
		}
	}
	out := map[string]any{
		"architectures": []string{"Gemma3ForCausalLM"}, "model_type": Gemma3,
		"vocab_size": cfg.VocabSize, "hidden_size": cfg.DModel, "intermediate_size": cfg.Hidden(),
		"num_hidden_layers": cfg.Layers, "num_attention_heads": cfg.Heads, "num_key_value_heads": cfg.KVHeadCount(),
		"head_dim": cfg.HeadDim(), "max_position_embeddings": cfg.Context, "rms_norm_eps": cfg.NormEps,
		"rope_theta": cfg.RoPEBase, "rope_local_base_freq": cfg.RoPELocalBase, "rope_scaling": nil,
		"hidden_activation": "gelu_pytorch_tanh", "query_pre_attn_scalar": cfg.QueryScale,
		"sliding_window": cfg.SlidingWindow, "sliding_window_pattern": cfg.SlidingPattern, "layer_types": types,
		"final_logit_softcapping": nil, "attn_logit_softcapping": nil, "attention_bias": false,
		"attention_dropout": 0.0, "tie_word_embeddings": true, "initializer_range": cfg.InitStd,
		"use_cache": true, "torch_dtype": cfg.ParamDtype().String(),
	}
	if cfg.RoPEScale != 0 && cfg.RoPEScale != 1 {
		out["rope_scaling"] = map[string]any{"rope_type": "linear", "factor": cfg.RoPEScale}
	}
	return out
}

// checkGemma3 reports a field of cfg that Gemma3ForCausalLM cannot
// express.
func checkGemma3(cfg model.Config) error {
	switch {
	case cfg.Bias || cfg.QKVBias || cfg.OutBias:
		return fmt.Errorf("a gemma3_text model has no biases")
	case !cfg.QKNorm || !cfg.PostNorms || !cfg.EmbedScale || !cfg.TiedEmbeddings:
		return fmt.Errorf("a gemma3_text model has q/k norms, post-norms, scaled and tied embeddings (qk_norm, post_norms, embed_scale, tied_embeddings)")
	case cfg.GELU != model.GELUTanh:
		return fmt.Errorf("a gemma3_text model's MLP gate is the tanh GELU, not %q", cfg.GELU)
	case cfg.SlidingWindow == 0 || cfg.SlidingPattern == 0 || cfg.RoPELocalBase == 0 || cfg.QueryScale == 0:
		return fmt.Errorf("a gemma3_text model needs sliding_window, sliding_pattern, rope_local_base and query_scale")
	case cfg.RoPEType != "":
		return fmt.Errorf("a gemma3_text model here has no rope_type %q", cfg.RoPEType)
	}
	return nil
}
