package hf

import "github.com/posttrainllm/posttrainllm/model"

// exportConfig is the config.json written for cfg of family: the keys a
// real checkpoint of that family carries, with the values transformers
// needs to compute what cfg computes.
func exportConfig(cfg model.Config, family string) map[string]any {
	dtype := cfg.ParamDtype().String()
	if family == GPT2 {
		act := "gelu_new"
		if cfg.GELU != model.GELUTanh {
			act = "gelu"
		}
		return map[string]any{
			"architectures": []string{"GPT2LMHeadModel"}, "model_type": GPT2,
			"vocab_size": cfg.VocabSize, "n_positions": cfg.Context, "n_ctx": cfg.Context,
			"n_embd": cfg.DModel, "n_layer": cfg.Layers, "n_head": cfg.Heads, "n_inner": cfg.Hidden(),
			"activation_function": act, "layer_norm_epsilon": cfg.NormEps, "tie_word_embeddings": true,
			"torch_dtype": dtype,
		}
	}
	if family == Gemma3 {
		return gemma3ExportConfig(cfg)
	}
	out := map[string]any{
		"architectures": []string{ropeFamilies[family].arch}, "model_type": family,
		"vocab_size": cfg.VocabSize, "hidden_size": cfg.DModel, "intermediate_size": cfg.Hidden(),
		"num_hidden_layers": cfg.Layers, "num_attention_heads": cfg.Heads,
		"num_key_value_heads": cfg.KVHeadCount(), "max_position_embeddings": cfg.Context,
		"rms_norm_eps": cfg.NormEps, "rope_theta": cfg.RoPEBase, "hidden_act": "silu",
		"tie_word_embeddings": cfg.TiedEmbeddings, "rope_scaling": nil, "attention_dropout": 0.0,
		"initializer_range": cfg.InitStd, "use_cache": true, "torch_dtype": dtype,
	}
	switch {
	case cfg.RoPEType == model.RoPELlama3:
		out["rope_scaling"] = map[string]any{
			"rope_type": model.RoPELlama3, "factor": cfg.RoPEFactor, "low_freq_factor": cfg.RoPELowFreqFactor,
			"high_freq_factor": cfg.RoPEHighFreqFactor, "original_max_position_embeddings": cfg.RoPEOriginalContext,
		}
	case cfg.RoPEScale != 0 && cfg.RoPEScale != 1:
		out["rope_scaling"] = map[string]any{"rope_type": "linear", "factor": cfg.RoPEScale}
	}
	hd := cfg.HeadDim()
	switch family {
	case Llama:
		out["attention_bias"], out["mlp_bias"], out["head_dim"], out["pretraining_tp"] = cfg.QKVBias, false, hd, 1
	case Mistral:
		out["head_dim"], out["sliding_window"] = hd, window(cfg)
	case Qwen2:
		out["use_sliding_window"], out["sliding_window"], out["max_window_layers"] = false, cfg.Context, cfg.Layers
		if hd*cfg.Heads != cfg.DModel {
			out["head_dim"] = hd
		}
	case Qwen3:
		out["attention_bias"], out["head_dim"] = cfg.QKVBias, hd
		out["use_sliding_window"], out["sliding_window"], out["max_window_layers"] = false, nil, cfg.Layers
	case Phi3:
		// Phi3Config's default pad_token_id (32000) would index past a
		// smaller vocabulary's embedding table.
		out["original_max_position_embeddings"], out["sliding_window"], out["pad_token_id"] = cfg.Context, window(cfg), nil
		out["resid_pdrop"], out["embd_pdrop"] = 0.0, 0.0
	}
	return out
}

// window is config.json's sliding_window of cfg: null without one.
func window(cfg model.Config) any {
	if cfg.SlidingWindow == 0 {
		return nil
	}
	return cfg.SlidingWindow
}
