package hf

import (
	"fmt"

	"github.com/posttrainllm/posttrainllm/mlx"
	"github.com/posttrainllm/posttrainllm/model"
)

// tensors is a folder's tensors by Hugging Face name; take removes one, so
// what is left at the end was not mapped.
type tensors map[string]*mlx.Array

func (t tensors) take(name string) (*mlx.Array, error) {
	a, ok := t[name]
	if !ok {
		return nil, fmt.Errorf("tensor %q is missing", name)
	}
	delete(t, name)
	return a, nil
}

// toParams maps a folder's tensors of family onto the model's parameter
// names. GPT-2's Conv1D weights are stored [in, out] and transposed here
// to the model's [out, in]; its c_attn holds q, k and v side by side and
// is split. The Llama-shaped families store projections [out, in] already,
// and their q and k rows are in the rotate-half order that MLX's RoPE
// (traditional = false) uses, so they map as they are (ropeToParams).
//
// Gemma 3's norm tensors are Gemma's w of (1 + w), mapped to the gains
// 1 + w, unless gains says they hold the gains (gemma3ToParams).
func toParams(family string, cfg model.Config, t tensors, gains bool) (map[string]*mlx.Array, error) {
	out := map[string]*mlx.Array{}
	var errs []error
	take := func(name string) *mlx.Array {
		a, err := t.take(name)
		if err != nil {
			errs = append(errs, err)
		}
		return a
	}
	switch family {
	case GPT2:
		pre := ""
		if _, ok := t["transformer.wte.weight"]; ok {
			pre = "transformer."
		}
		conv := func(hfName, name string) { // Conv1D [in, out] → [out, in], and its bias
			if w := take(hfName + ".weight"); w != nil {
				out[name+".weight"] = mlx.Transpose(w)
			}
			out[name+".bias"] = take(hfName + ".bias")
		}
		ln := func(hfName, name string) {
			out[name+".weight"] = take(hfName + ".weight")
			out[name+".bias"] = take(hfName + ".bias")
		}
		out["tok_embeddings.weight"] = take(pre + "wte.weight")
		out["pos_embeddings.weight"] = take(pre + "wpe.weight")
		for i := range cfg.Layers {
			h, p := fmt.Sprintf("%sh.%d.", pre, i), fmt.Sprintf("blocks.%d.", i)
			ln(h+"ln_1", p+"attn_norm")
			if w, b := take(h+"attn.c_attn.weight"), take(h+"attn.c_attn.bias"); w != nil && b != nil {
				ws, bs := mlx.Split(mlx.Transpose(w), 3, 0), mlx.Split(b, 3, 0)
				for j, n := range []string{"wq", "wk", "wv"} {
					out[p+"attn."+n+".weight"], out[p+"attn."+n+".bias"] = ws[j], bs[j]
				}
			}
			conv(h+"attn.c_proj", p+"attn.wo")
			ln(h+"ln_2", p+"mlp_norm")
			conv(h+"mlp.c_fc", p+"mlp.w1")
			conv(h+"mlp.c_proj", p+"mlp.w2")
			// The causal-mask buffers of older GPT-2 files are not weights.
			delete(t, h+"attn.bias")
			delete(t, h+"attn.masked_bias")
		}
		ln(pre+"ln_f", "norm")
		delete(t, "lm_head.weight") // tied to wte
	case Llama, Mistral, Qwen2, Qwen3, Phi3:
		if err := ropeToParams(family, cfg, t, out, take); err != nil {
			return nil, err
		}
	case Gemma3:
		gemma3ToParams(cfg, t, out, take, gains)
	default:
		return nil, fmt.Errorf("family %q is not supported", family)
	}
	if len(errs) > 0 {
		return nil, errs[0]
	}
	for name := range t {
		return nil, fmt.Errorf("tensor %q is not a parameter of a %s model (quantized or adapter weights are not supported)", name, family)
	}
	return out, nil
}

// fromParams is the reverse of toParams: the model's parameters by name,
// as the tensors of a Hugging Face folder of family. Padding rows of the
// vocabulary (PadVocabTo) are dropped.
func fromParams(family string, cfg model.Config, p map[string]*mlx.Array) map[string]*mlx.Array {
	out := map[string]*mlx.Array{}
	vocab := func(a *mlx.Array) *mlx.Array {
		if a.Dim(0) == cfg.VocabSize {
			return a
		}
		return mlx.Slice(a, []int{0, 0}, []int{cfg.VocabSize, a.Dim(1)})
	}
	switch family {
	case GPT2:
		conv := func(name, hfName string) {
			out[hfName+".weight"] = mlx.Transpose(p[name+".weight"])
			out[hfName+".bias"] = p[name+".bias"]
		}
		ln := func(name, hfName string) {
			out[hfName+".weight"], out[hfName+".bias"] = p[name+".weight"], p[name+".bias"]
		}
		out["transformer.wte.weight"] = vocab(p["tok_embeddings.weight"])
		out["transformer.wpe.weight"] = p["pos_embeddings.weight"]
		for i := range cfg.Layers {
			h, b := fmt.Sprintf("transformer.h.%d.", i), fmt.Sprintf("blocks.%d.", i)
			ln(b+"attn_norm", h+"ln_1")
			var ws, bs []*mlx.Array
			for _, n := range []string{"wq", "wk", "wv"} {
				ws = append(ws, p[b+"attn."+n+".weight"])
				bs = append(bs, p[b+"attn."+n+".bias"])
			}
			out[h+"attn.c_attn.weight"] = mlx.Transpose(mlx.Concatenate(ws, 0))
			out[h+"attn.c_attn.bias"] = mlx.Concatenate(bs, 0)
			conv(b+"attn.wo", h+"attn.c_proj")
			ln(b+"mlp_norm", h+"ln_2")
			conv(b+"mlp.w1", h+"mlp.c_fc")
			conv(b+"mlp.w2", h+"mlp.c_proj")
		}
		ln("norm", "transformer.ln_f")
	case Gemma3:
		gemma3FromParams(cfg, p, out, vocab)
	default:
		ropeFromParams(family, cfg, p, out, vocab)
	}
	return out
}

// isFloat reports whether a safetensors dtype holds unquantized weights.
func isFloat(d mlx.Dtype) bool {
	return d == mlx.Float32 || d == mlx.Float16 || d == mlx.BFloat16
}
