// Package model defines Transformer, the one decoder-only transformer every
// family is built as. Its defaults, the project's own TinyGPT family (the
// presets' shape), are pre-norm RMSNorm blocks, rotary causal attention
// through MLX's fused kernel and a GELU MLP, written as pure functions of
// a flat, named parameter list so a whole training step can be traced and
// compiled. Config fields turn the same code path into the GPT-2 family
// (LayerNorm with biases, learned positions, tanh GELU) or the Llama
// family (SwiGLU, grouped-query attention, scaled RoPE) and its
// relatives: Llama 3's scaled frequencies, Qwen2's q/k/v biases, Qwen3's
// per-head q/k norms and head widths other than d_model/heads, Mistral's
// sliding window, and Gemma 3's sliding layers between global ones,
// post-norms, GeGLU MLP and scaled embeddings. A KVCache lets generation
// feed each token once.
package model

import (
	"fmt"
	"math"

	"github.com/posttrainllm/posttrainllm/mlx"
)

// Config is the whole shape of a Transformer, in one struct (as nanoGPT's
// GPTConfig). Its JSON form is stored in checkpoints.
type Config struct {
	VocabSize int     `json:"vocab_size"`
	DModel    int     `json:"d_model"`
	Layers    int     `json:"layers"`
	Heads     int     `json:"heads"`
	Context   int     `json:"context"`   // maximum sequence length T
	MLPRatio  float64 `json:"mlp_ratio"` // hidden width = MLPRatio·DModel
	// GELU is the MLP's activation: "exact" (GELUExact, the default) or
	// "tanh" (GELUTanh, GPT-2's approximation, cheaper on the CPU).
	// Checkpoints written before this field existed used the exact GELU.
	GELU string `json:"gelu"`
	// Dtype is the compute dtype: "float32" or "bfloat16".
	Dtype string `json:"dtype"`
	// MasterFP32 keeps parameters in float32 and casts them to Dtype in the
	// forward pass; without it parameters are stored in Dtype.
	MasterFP32     bool    `json:"master_fp32"`
	TiedEmbeddings bool    `json:"tied_embeddings"` // output head reuses tok_embeddings
	EmbedNorm      bool    `json:"embed_norm"`      // RMSNorm right after the embedding
	ZLoss          float64 `json:"z_loss"`          // coefficient of mean(logsumexp(logits)²)
	RoPEBase       float64 `json:"rope_base"`
	NormEps        float64 `json:"norm_eps"`
	InitStd        float64 `json:"init_std"`
	// PadVocabTo rounds the rows of the embedding table and output
	// projection up to a multiple of PadVocabTo (0 or 1: no padding). The
	// extra logits are masked to −∞, so losses, gradients and samples are
	// those of VocabSize classes. On a GPU a vocabulary like GPT-2's 50,257
	// leaves the rows of the [tokens × vocabulary] logits unaligned and
	// cuBLAS falls back to slow kernels; 64 (50,304, as in nanoGPT) fixes it.
	PadVocabTo int `json:"pad_vocab_to,omitempty"`

	// Family-level choices (GPT-2, Llama, …); each zero value is the
	// default, TinyGPT family's (the presets' shape), so
	// configurations and checkpoints written without them mean the same.

	// Norm is "rms" (RMSNorm, the default) or "layer" (LayerNorm).
	Norm string `json:"norm,omitempty"`
	// Bias adds a bias to every projection and, with LayerNorm, to every
	// norm, as GPT-2 has.
	Bias bool `json:"bias,omitempty"`
	// Positions is "rope" (rotary, the default) or "learned" (a table of
	// absolute position embeddings added to the token embeddings, GPT-2).
	Positions string `json:"positions,omitempty"`
	// MLP is "gelu" (GELU(x·W1ᵀ)·W2ᵀ, the default) or "swiglu"
	// ((SiLU(x·W1ᵀ) ⊙ x·W3ᵀ)·W2ᵀ, Llama).
	MLP string `json:"mlp,omitempty"`
	// KVHeads is the number of key/value heads; fewer than Heads is
	// grouped-query attention. 0 means Heads.
	KVHeads int `json:"kv_heads,omitempty"`
	// MLPHidden is the MLP's inner width when it is not a round multiple of
	// DModel (Llama's intermediate_size); 0 means MLPRatio·DModel.
	MLPHidden int `json:"mlp_hidden,omitempty"`
	// RoPEScale is linear RoPE scaling: positions are divided by it. 0 or 1
	// means none.
	RoPEScale float64 `json:"rope_scale,omitempty"`
	// HeadDimension is the width of one attention head where it is not
	// DModel/Heads (Qwen3, some Llama 3 checkpoints): q is
	// Heads·HeadDimension wide, k and v KVHeads·HeadDimension, and the
	// output projection maps Heads·HeadDimension back to DModel. 0 means
	// DModel/Heads.
	HeadDimension int `json:"head_dim,omitempty"`
	// QKVBias adds a bias to the q, k and v projections (Qwen2); Bias
	// implies it.
	QKVBias bool `json:"qkv_bias,omitempty"`
	// OutBias adds a bias to attention's output projection wo (with
	// QKVBias, Llama's attention_bias); Bias implies it.
	OutBias bool `json:"out_bias,omitempty"`
	// QKNorm normalises every head of q and of k with an RMSNorm whose
	// gain is HeadDim wide, before the rotary positions (Qwen3's q_norm
	// and k_norm).
	QKNorm bool `json:"qk_norm,omitempty"`
	// RoPEType is how rotary frequencies are scaled: "" (the base's
	// frequencies, positions divided by RoPEScale) or "llama3" (Llama
	// 3.1's rope_scaling, described by the four fields below).
	RoPEType string `json:"rope_type,omitempty"`
	// RoPEFactor, RoPELowFreqFactor, RoPEHighFreqFactor and
	// RoPEOriginalContext are Llama 3's rope_scaling (factor,
	// low_freq_factor, high_freq_factor, original_max_position_embeddings):
	// frequencies whose wavelength exceeds RoPEOriginalContext /
	// RoPELowFreqFactor are divided by RoPEFactor, those whose wavelength
	// is below RoPEOriginalContext / RoPEHighFreqFactor are kept, and those
	// between are interpolated (rope.go).
	RoPEFactor          float64 `json:"rope_factor,omitempty"`
	RoPELowFreqFactor   float64 `json:"rope_low_freq_factor,omitempty"`
	RoPEHighFreqFactor  float64 `json:"rope_high_freq_factor,omitempty"`
	RoPEOriginalContext int     `json:"rope_original_context,omitempty"`
	// SlidingWindow limits the attention of sliding layers to the
	// SlidingWindow most recent positions, the query's own included
	// (Mistral's sliding_window; Gemma 3's local layers). 0 means every
	// layer attends to every earlier position.
	SlidingWindow int `json:"sliding_window,omitempty"`
	// SlidingPattern interleaves sliding layers with global ones: layer l
	// is global when (l+1) is a multiple of SlidingPattern (Gemma 3: 6,
	// five local layers, then a global one). 0 makes every layer sliding.
	SlidingPattern int `json:"sliding_pattern,omitempty"`
	// RoPELocalBase is the rotary base of sliding layers, which take no
	// rope scaling (Gemma 3's rope_local_base_freq); 0 means they rotate
	// as global layers do.
	RoPELocalBase float64 `json:"rope_local_base,omitempty"`
	// PostNorms normalises the outputs of attention and of the MLP with
	// norms of their own (attn_post_norm, mlp_post_norm) before they join
	// the residual stream, as Gemma 2 and 3 do.
	PostNorms bool `json:"post_norms,omitempty"`
	// EmbedScale multiplies the token embeddings by √DModel, rounded to
	// the compute dtype (Gemma); a tied head uses the table unscaled.
	EmbedScale bool `json:"embed_scale,omitempty"`
	// QueryScale scales attention scores by 1/√QueryScale rather than
	// 1/√HeadDim (Gemma's query_pre_attn_scalar); 0 means HeadDim.
	QueryScale float64 `json:"query_scale,omitempty"`
	// Family is the Hugging Face model_type the configuration came from
	// (llama, mistral, qwen2, qwen3, phi3, gpt2), set by import so that
	// export writes the same architecture and tensor layout back (Phi-3's
	// fused projections, say). It does not change what the model computes;
	// "" lets export infer the family from the other fields.
	Family string `json:"family,omitempty"`
}

// maxPadVocabTo bounds PadVocabTo: beyond it padding only wastes memory.
const maxPadVocabTo = 4096

// PaddedVocab is the number of rows of the embedding table and output
// projection: VocabSize rounded up to a multiple of PadVocabTo.
func (c Config) PaddedVocab() int {
	if c.PadVocabTo <= 1 {
		return c.VocabSize
	}
	return (c.VocabSize + c.PadVocabTo - 1) / c.PadVocabTo * c.PadVocabTo
}

// WithDefaults fills zero-valued optional fields with the defaults:
// MLP ratio 4, exact GELU, float32, RoPE base 10000, norm eps 1e-5, init
// std 0.02.
func (c Config) WithDefaults() Config {
	if c.MLPRatio == 0 {
		c.MLPRatio = 4
	}
	if c.GELU == "" {
		c.GELU = GELUExact
	}
	if c.Dtype == "" {
		c.Dtype = "float32"
	}
	if c.RoPEBase == 0 {
		c.RoPEBase = 10000
	}
	if c.NormEps == 0 {
		c.NormEps = 1e-5
	}
	if c.InitStd == 0 {
		c.InitStd = 0.02
	}
	return c
}

// Validate reports the first field that cannot describe a Transformer.
func (c Config) Validate() error {
	positive := []struct {
		name string
		v    int
	}{{"vocab_size", c.VocabSize}, {"d_model", c.DModel}, {"layers", c.Layers}, {"heads", c.Heads}, {"context", c.Context}}
	for _, f := range positive {
		if f.v <= 0 {
			return fmt.Errorf("model config: %s = %d, want > 0", f.name, f.v)
		}
	}
	if c.PadVocabTo < 0 || c.PadVocabTo > maxPadVocabTo {
		return fmt.Errorf("model config: pad_vocab_to = %d, want 0 (no padding) to %d", c.PadVocabTo, maxPadVocabTo)
	}
	if c.HeadDimension < 0 {
		return fmt.Errorf("model config: head_dim = %d, want >= 0 (0: d_model/heads)", c.HeadDimension)
	}
	if c.HeadDimension == 0 && c.DModel%c.Heads != 0 {
		return fmt.Errorf("model config: d_model %d is not divisible by heads %d", c.DModel, c.Heads)
	}
	if err := c.validateFamily(); err != nil {
		return err
	}
	if hd := c.HeadDim(); hd%2 != 0 && c.Positions != PositionsLearned {
		return fmt.Errorf("model config: head dimension %d (head_dim, or d_model/heads) must be even for rotary embeddings", hd)
	}
	if !(c.MLPRatio > 0) || math.IsInf(c.MLPRatio, 0) || c.Hidden() < 1 {
		return fmt.Errorf("model config: mlp_ratio = %g, want > 0 and finite", c.MLPRatio)
	}
	if c.GELU != "" && c.GELU != GELUExact && c.GELU != GELUTanh {
		return fmt.Errorf("model config: gelu %q, want %q or %q", c.GELU, GELUExact, GELUTanh)
	}
	if err := CheckDtype(c.Dtype); err != nil {
		return fmt.Errorf("model config: %w", err)
	}
	for _, f := range []struct {
		name string
		v    float64
	}{{"z_loss", c.ZLoss}, {"rope_base", c.RoPEBase}, {"norm_eps", c.NormEps}, {"init_std", c.InitStd}} {
		if f.v < 0 || math.IsNaN(f.v) || math.IsInf(f.v, 0) {
			return fmt.Errorf("model config: %s = %g, want a finite value >= 0", f.name, f.v)
		}
	}
	return nil
}

// HeadDim is the width of one attention head: HeadDimension, or
// DModel/Heads when it is 0.
func (c Config) HeadDim() int {
	if c.HeadDimension > 0 {
		return c.HeadDimension
	}
	return c.DModel / c.Heads
}

// Hidden is the MLP's inner width.
func (c Config) Hidden() int {
	if c.MLPHidden > 0 {
		return c.MLPHidden
	}
	return int(math.Round(c.MLPRatio * float64(c.DModel)))
}

// CheckDtype reports a name that is not a compute dtype: float32,
// bfloat16 or float16.
func CheckDtype(name string) error {
	if d, err := mlx.ParseDtype(name); err != nil || (d != mlx.Float32 && d != mlx.BFloat16 && d != mlx.Float16) {
		return fmt.Errorf("dtype %q, want float32, bfloat16 or float16", name)
	}
	return nil
}

// ComputeDtype is the dtype of activations.
func (c Config) ComputeDtype() mlx.Dtype {
	d, err := mlx.ParseDtype(c.Dtype)
	if err != nil {
		return mlx.Float32
	}
	return d
}

// ParamDtype is the dtype parameters are stored in.
func (c Config) ParamDtype() mlx.Dtype {
	if c.MasterFP32 {
		return mlx.Float32
	}
	return c.ComputeDtype()
}
