package hf

import (
	"fmt"

	"github.com/posttrainllm/posttrainllm/mlx"
	"github.com/posttrainllm/posttrainllm/model"
)

// ropeProjections are the attention and MLP projections of a Llama-shaped
// layer stored apart: model name, Hugging Face name.
var ropeProjections = [][2]string{
	{"attn.wq", "self_attn.q_proj"}, {"attn.wk", "self_attn.k_proj"}, {"attn.wv", "self_attn.v_proj"},
	{"attn.wo", "self_attn.o_proj"}, {"mlp.w1", "mlp.gate_proj"}, {"mlp.w3", "mlp.up_proj"}, {"mlp.w2", "mlp.down_proj"},
}

// ropeBiased says whether the model parameter name (attn.wq, …) of cfg
// has a bias.
func ropeBiased(cfg model.Config, name string) bool {
	switch name {
	case "attn.wq", "attn.wk", "attn.wv":
		return cfg.Bias || cfg.QKVBias
	case "attn.wo":
		return cfg.Bias || cfg.OutBias
	}
	return cfg.Bias
}

// ropeToParams maps the tensors of a Llama-shaped family into out: every
// projection as it is, q/k/v and o biases where cfg has them, Qwen3's
// q_norm and k_norm, and Phi-3's fused qkv_proj ([q; k; v] rows) and
// gate_up_proj ([gate; up] rows) split into the model's projections.
func ropeToParams(family string, cfg model.Config, t tensors, out map[string]*mlx.Array, take func(string) *mlx.Array) error {
	qDim, kvDim := cfg.Heads*cfg.HeadDim(), cfg.KVHeadCount()*cfg.HeadDim()
	fused := func(name string, rows int) (*mlx.Array, error) {
		w := take(name)
		if w != nil && (w.Ndim() != 2 || w.Dim(0) != rows || w.Dim(1) != cfg.DModel) {
			return nil, fmt.Errorf("tensor %q has shape %v, the config needs [%d %d]", name, w.Shape(), rows, cfg.DModel)
		}
		return w, nil
	}
	out["tok_embeddings.weight"] = take("model.embed_tokens.weight")
	for i := range cfg.Layers {
		h, p := fmt.Sprintf("model.layers.%d.", i), fmt.Sprintf("blocks.%d.", i)
		out[p+"attn_norm.weight"] = take(h + "input_layernorm.weight")
		out[p+"mlp_norm.weight"] = take(h + "post_attention_layernorm.weight")
		projections := ropeProjections
		if family == Phi3 {
			qkv, err := fused(h+"self_attn.qkv_proj.weight", qDim+2*kvDim)
			if err != nil {
				return err
			}
			gateUp, err := fused(h+"mlp.gate_up_proj.weight", 2*cfg.Hidden())
			if err != nil {
				return err
			}
			if qkv != nil {
				s := mlx.SplitAt(qkv, []int{qDim, qDim + kvDim}, 0)
				out[p+"attn.wq.weight"], out[p+"attn.wk.weight"], out[p+"attn.wv.weight"] = s[0], s[1], s[2]
			}
			if gateUp != nil {
				s := mlx.Split(gateUp, 2, 0)
				out[p+"mlp.w1.weight"], out[p+"mlp.w3.weight"] = s[0], s[1]
			}
			projections = [][2]string{{"attn.wo", "self_attn.o_proj"}, {"mlp.w2", "mlp.down_proj"}}
		}
		for _, n := range projections {
			out[p+n[0]+".weight"] = take(h + n[1] + ".weight")
			if ropeBiased(cfg, n[0]) {
				out[p+n[0]+".bias"] = take(h + n[1] + ".bias")
			}
		}
		if cfg.QKNorm {
			out[p+"attn.q_norm.weight"] = take(h + "self_attn.q_norm.weight")
			out[p+"attn.k_norm.weight"] = take(h + "self_attn.k_norm.weight")
		}
		delete(t, h+"self_attn.rotary_emb.inv_freq") // a buffer of older files
	}
	out["norm.weight"] = take("model.norm.weight")
	if cfg.TiedEmbeddings {
		delete(t, "lm_head.weight") // some tied files store the copy
	} else {
		out["output.weight"] = take("lm_head.weight")
	}
	return nil
}

// ropeFromParams is ropeToParams reversed: the model's parameters p as
// the tensors of family, Phi-3's projections fused again. vocab drops the
// padding rows of the embedding and head.
func ropeFromParams(family string, cfg model.Config, p, out map[string]*mlx.Array, vocab func(*mlx.Array) *mlx.Array) {
	out["model.embed_tokens.weight"] = vocab(p["tok_embeddings.weight"])
	for i := range cfg.Layers {
		h, b := fmt.Sprintf("model.layers.%d.", i), fmt.Sprintf("blocks.%d.", i)
		out[h+"input_layernorm.weight"] = p[b+"attn_norm.weight"]
		out[h+"post_attention_layernorm.weight"] = p[b+"mlp_norm.weight"]
		projections := ropeProjections
		if family == Phi3 {
			out[h+"self_attn.qkv_proj.weight"] = mlx.Concatenate([]*mlx.Array{
				p[b+"attn.wq.weight"], p[b+"attn.wk.weight"], p[b+"attn.wv.weight"]}, 0)
			out[h+"mlp.gate_up_proj.weight"] = mlx.Concatenate([]*mlx.Array{p[b+"mlp.w1.weight"], p[b+"mlp.w3.weight"]}, 0)
			projections = [][2]string{{"attn.wo", "self_attn.o_proj"}, {"mlp.w2", "mlp.down_proj"}}
		}
		for _, n := range projections {
			out[h+n[1]+".weight"] = p[b+n[0]+".weight"]
			if ropeBiased(cfg, n[0]) {
				out[h+n[1]+".bias"] = p[b+n[0]+".bias"]
			}
		}
		if cfg.QKNorm {
			out[h+"self_attn.q_norm.weight"] = p[b+"attn.q_norm.weight"]
			out[h+"self_attn.k_norm.weight"] = p[b+"attn.k_norm.weight"]
		}
	}
	out["model.norm.weight"] = p["norm.weight"]
	if !cfg.TiedEmbeddings {
		out["lm_head.weight"] = vocab(p["output.weight"])
	}
}
