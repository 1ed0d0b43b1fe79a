package hf

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"

	"github.com/posttrainllm/posttrainllm/model"
)

// ropeFamily is what a Llama-shaped family (RMSNorm, rotary positions,
// SwiGLU) defaults to or hard-codes, as transformers' configuration and
// attention classes of that model_type do.
type ropeFamily struct {
	arch    string  // architectures[0]
	eps     float64 // rms_norm_eps when absent
	kvHeads int     // num_key_value_heads when absent; 0: num_attention_heads
	headDim int     // head_dim when absent; 0: hidden_size/num_attention_heads
	// attentionBias: attention_bias puts a bias on q, k, v and o (Llama,
	// Qwen3); otherwise the class ignores it.
	attentionBias bool
	qkvBias       bool // q, k and v always have biases, o none (Qwen2)
	qkNorm        bool // q_norm and k_norm (Qwen3)
	readsHeadDim  bool // the class reads head_dim (Phi-3's does not)
	ropeScaling   bool // the family's rope_scaling may be linear or llama3 (Phi-3's is longrope)
	// window: how sliding_window applies. "always" (Mistral, Phi-3), or
	// "qwen" (only with use_sliding_window, from layer max_window_layers).
	window        string
	windowDefault int // sliding_window when absent (Mistral: 4096); 0 none
	// maxWindowLayers is max_window_layers when absent (Qwen).
	maxWindowLayers int
}

var ropeFamilies = map[string]ropeFamily{
	Llama:   {arch: "LlamaForCausalLM", eps: 1e-6, attentionBias: true, readsHeadDim: true, ropeScaling: true},
	Mistral: {arch: "MistralForCausalLM", eps: 1e-6, kvHeads: 8, readsHeadDim: true, ropeScaling: true, window: "always", windowDefault: 4096},
	Qwen2: {arch: "Qwen2ForCausalLM", eps: 1e-6, kvHeads: 32, qkvBias: true, readsHeadDim: true, ropeScaling: true,
		window: "qwen", windowDefault: 4096, maxWindowLayers: 28},
	Qwen3: {arch: "Qwen3ForCausalLM", eps: 1e-6, kvHeads: 32, headDim: 128, attentionBias: true, qkNorm: true, readsHeadDim: true,
		ropeScaling: true, window: "qwen", windowDefault: 4096, maxWindowLayers: 28},
	Phi3: {arch: "Phi3ForCausalLM", eps: 1e-5, window: "always"},
}

// ropeFamilyConfig maps the configuration of a Llama-shaped family
// (Llama, Mistral, Qwen2, Qwen3, Phi-3).
func ropeFamilyConfig(h hfConfig) (model.Config, error) {
	fam := ropeFamilies[h.ModelType]
	switch {
	case h.HiddenAct != "" && h.HiddenAct != "silu":
		return model.Config{}, fmt.Errorf("hidden_act %q is not supported; want silu", h.HiddenAct)
	case h.MLPBias:
		return model.Config{}, fmt.Errorf("mlp_bias = true is not supported")
	case h.IntermediateSize <= 0:
		return model.Config{}, fmt.Errorf("intermediate_size = %d, want > 0", h.IntermediateSize)
	case h.PartialRotaryFactor != nil && *h.PartialRotaryFactor != 1:
		return model.Config{}, fmt.Errorf("partial_rotary_factor = %g is not supported; want 1 (every feature of a head rotated)", *h.PartialRotaryFactor)
	}
	cfg := model.Config{
		VocabSize: h.VocabSize, DModel: h.HiddenSize, Layers: h.NumHiddenLayers, Heads: h.NumAttentionHeads,
		Context: h.MaxPositionEmbeddings, MLPRatio: 4, MLPHidden: h.IntermediateSize,
		TiedEmbeddings: orDefault(h.TieEmbeddings, false), NormEps: orDefault(h.RMSNormEps, fam.eps),
		RoPEBase: orDefault(h.RoPETheta, 10000), Norm: model.NormRMS, Positions: model.PositionsRoPE, MLP: model.MLPSwiGLU,
		QKVBias: fam.qkvBias, QKNorm: fam.qkNorm,
	}
	cfg.KVHeads = orDefault(h.NumKeyValueHeads, fam.kvHeads)
	if cfg.KVHeads == cfg.Heads {
		cfg.KVHeads = 0
	}
	if fam.attentionBias && orDefault(h.AttentionBias, false) {
		cfg.QKVBias, cfg.OutBias = true, true
	}
	if h.NumAttentionHeads <= 0 {
		return model.Config{}, fmt.Errorf("num_attention_heads = %d, want > 0", h.NumAttentionHeads)
	}
	natural := h.HiddenSize / h.NumAttentionHeads
	hd := fam.headDim
	if h.HeadDim != nil && *h.HeadDim != 0 {
		hd = *h.HeadDim
	}
	switch {
	case hd == 0 || hd == natural && h.HiddenSize%h.NumAttentionHeads == 0:
	case !fam.readsHeadDim:
		return model.Config{}, fmt.Errorf("head_dim = %d: %s's attention has head width hidden_size/num_attention_heads = %d", hd, h.ModelType, natural)
	case hd < 0:
		return model.Config{}, fmt.Errorf("head_dim = %d, want > 0", hd)
	default:
		cfg.HeadDimension = hd
	}
	if err := ropeScalingConfig(h, fam, &cfg); err != nil {
		return model.Config{}, err
	}
	window, err := slidingWindow(h, fam)
	if err != nil {
		return model.Config{}, err
	}
	cfg.SlidingWindow = window
	return cfg, nil
}

// ropeScalingConfig maps rope_scaling onto cfg: linear (positions divided
// by factor) or llama3 (Llama 3.1's frequency scaling); a missing one or
// rope_type default means none.
func ropeScalingConfig(h hfConfig, fam ropeFamily, cfg *model.Config) error {
	s := h.RoPEScaling
	if s == nil {
		return nil
	}
	kind := s.RoPEType
	if kind == "" {
		kind = s.Type
	}
	if kind == "default" {
		return nil
	}
	if !fam.ropeScaling {
		return fmt.Errorf("rope_scaling type %q is not supported for %s (longrope's short and long factors are not mapped); want no rope_scaling", kind, h.ModelType)
	}
	positive := func(v float64) bool { return v > 0 && !math.IsInf(v, 0) }
	switch kind {
	case "linear":
		if !positive(s.Factor) {
			return fmt.Errorf("rope_scaling factor = %g, want a finite value > 0", s.Factor)
		}
		cfg.RoPEScale = s.Factor
	case model.RoPELlama3:
		switch {
		case !positive(s.Factor):
			return fmt.Errorf("rope_scaling factor = %g, want a finite value > 0", s.Factor)
		case !positive(s.LowFreqFactor):
			return fmt.Errorf("rope_scaling low_freq_factor = %g, want a finite value > 0", s.LowFreqFactor)
		case !positive(s.HighFreqFactor) || s.HighFreqFactor <= s.LowFreqFactor:
			return fmt.Errorf("rope_scaling high_freq_factor = %g, want a finite value > low_freq_factor %g", s.HighFreqFactor, s.LowFreqFactor)
		case s.OriginalMax <= 0:
			return fmt.Errorf("rope_scaling original_max_position_embeddings = %d, want > 0", s.OriginalMax)
		}
		cfg.RoPEType, cfg.RoPEFactor, cfg.RoPELowFreqFactor, cfg.RoPEHighFreqFactor, cfg.RoPEOriginalContext =
			model.RoPELlama3, s.Factor, s.LowFreqFactor, s.HighFreqFactor, s.OriginalMax
	default:
		return fmt.Errorf("rope_scaling type %q is not supported; want linear or llama3 (or no rope_scaling)", kind)
	}
	return nil
}

// slidingWindow is the sliding window of a family that slides on every
// layer (Mistral, Phi-3) where it binds within the context (a window
// smaller than max_position_embeddings), 0 otherwise. Qwen's window, which
// slides on the layers from max_window_layers on, is refused where it
// binds: the model's windows are every layer's or a pattern's
// (model.Config's SlidingPattern), and the full attention computes the
// same function only while no key lies a window or more behind its query.
func slidingWindow(h hfConfig, fam ropeFamily) (int, error) {
	if fam.window == "" {
		return 0, nil
	}
	window := fam.windowDefault
	if len(h.SlidingWindow) > 0 {
		var w *int
		if err := json.Unmarshal(h.SlidingWindow, &w); err != nil {
			return 0, fmt.Errorf("sliding_window = %s, want an integer or null", h.SlidingWindow)
		}
		window = 0
		if w != nil {
			window = *w
		}
	}
	if window <= 0 || window >= h.MaxPositionEmbeddings {
		return 0, nil
	}
	if fam.window == "always" {
		return window, nil
	}
	if fam.window == "qwen" {
		if !h.UseSlidingWindow {
			return 0, nil
		}
		sliding := orDefault(h.MaxWindowLayers, fam.maxWindowLayers) < h.NumHiddenLayers
		if len(h.LayerTypes) > 0 {
			sliding = slices.Contains(h.LayerTypes, "sliding_attention")
		}
		if !sliding {
			return 0, nil
		}
	}
	return 0, fmt.Errorf("sliding_window = %d is smaller than the context (max_position_embeddings = %d) on the layers from max_window_layers on: Qwen's per-layer sliding window is not supported; want null or a window >= the context",
		window, h.MaxPositionEmbeddings)
}

// Family reports which Hugging Face family cfg is an instance of, or an
// error naming the field that keeps it from being one: export writes only
// models that transformers computes identically. A config imported from
// a folder names its family (model.Config's Family); otherwise GPT-2's
// shape is gpt2 and the rotary SwiGLU shape is qwen3 with q/k norms,
// qwen2 with q/k/v biases alone, llama otherwise.
func Family(cfg model.Config) (string, error) {
	cfg = cfg.WithDefaults()
	if cfg.EmbedNorm {
		return "", fmt.Errorf("embed_norm = true has no Hugging Face counterpart")
	}
	switch {
	case cfg.Norm == model.NormLayer && cfg.Positions == model.PositionsLearned:
		switch {
		case cfg.Family != "" && cfg.Family != GPT2:
			return "", fmt.Errorf("family %q: the model has GPT-2's shape (LayerNorm, learned positions)", cfg.Family)
		case !cfg.Bias:
			return "", fmt.Errorf("a GPT-2 model needs bias = true")
		case cfg.MLP == model.MLPSwiGLU:
			return "", fmt.Errorf("a GPT-2 model needs mlp = gelu, not %q", cfg.MLP)
		case cfg.KVHeads != 0 && cfg.KVHeads != cfg.Heads:
			return "", fmt.Errorf("a GPT-2 model needs kv_heads = heads, not %d", cfg.KVHeads)
		case !cfg.TiedEmbeddings:
			return "", fmt.Errorf("a GPT-2 model needs tied_embeddings = true")
		case cfg.QKNorm:
			return "", fmt.Errorf("a GPT-2 model has no q/k norms (qk_norm = true)")
		case cfg.HeadDim()*cfg.Heads != cfg.DModel:
			return "", fmt.Errorf("a GPT-2 model needs head_dim = d_model/heads, not %d", cfg.HeadDim())
		}
		return GPT2, nil
	case cfg.Norm != model.NormLayer && cfg.Positions != model.PositionsLearned && cfg.MLP == model.MLPGeGLU:
		if cfg.Family != "" && cfg.Family != Gemma3 {
			return "", fmt.Errorf("family %q: the model has Gemma 3's shape (GeGLU MLP)", cfg.Family)
		}
		return Gemma3, checkGemma3(cfg)
	case cfg.Norm != model.NormLayer && cfg.Positions != model.PositionsLearned && cfg.MLP == model.MLPSwiGLU:
		if cfg.Bias {
			return "", fmt.Errorf("a %s model needs bias = false (no MLP biases)", orName(cfg.Family, Llama))
		}
		family := cfg.Family
		switch {
		case family != "":
		case cfg.QKNorm:
			family = Qwen3
		case cfg.QKVBias && !cfg.OutBias:
			family = Qwen2
		default:
			family = Llama
		}
		if err := checkRopeFamily(cfg, family); err != nil {
			return "", err
		}
		return family, checkNoGemmaFields(cfg, family)
	}
	return "", fmt.Errorf("model config (norm %q, positions %q, mlp %q) is neither GPT-2 (norm layer, positions learned, mlp gelu) nor Llama-shaped (norm rms, positions rope, mlp swiglu)",
		orName(cfg.Norm, model.NormRMS), orName(cfg.Positions, model.PositionsRoPE), orName(cfg.MLP, model.MLPGELU))
}

// checkRopeFamily reports a field of the rotary SwiGLU config cfg that
// family's transformers class cannot express.
func checkRopeFamily(cfg model.Config, family string) error {
	fam, ok := ropeFamilies[family]
	if !ok {
		return fmt.Errorf("family %q is not a Llama-shaped family; want llama, mistral, qwen2, qwen3 or phi3", family)
	}
	switch {
	case cfg.QKNorm != fam.qkNorm:
		return fmt.Errorf("a %s model has qk_norm = %v, not %v", family, fam.qkNorm, cfg.QKNorm)
	case fam.qkvBias && (!cfg.QKVBias || cfg.OutBias):
		return fmt.Errorf("a %s model has q/k/v biases and no output bias (qkv_bias = true, out_bias = false)", family)
	case fam.attentionBias && cfg.QKVBias != cfg.OutBias:
		return fmt.Errorf("a %s model's attention_bias covers q, k, v and o alike; qkv_bias = %v, out_bias = %v", family, cfg.QKVBias, cfg.OutBias)
	case !fam.qkvBias && !fam.attentionBias && (cfg.QKVBias || cfg.OutBias):
		return fmt.Errorf("a %s model has no attention biases (qkv_bias = %v, out_bias = %v)", family, cfg.QKVBias, cfg.OutBias)
	case !fam.readsHeadDim && cfg.HeadDim()*cfg.Heads != cfg.DModel:
		return fmt.Errorf("a %s model needs head_dim = d_model/heads, not %d", family, cfg.HeadDim())
	case !fam.ropeScaling && (cfg.RoPEType != "" || cfg.RoPEScale != 0 && cfg.RoPEScale != 1):
		return fmt.Errorf("a %s model here has no rope scaling (rope_scale %g, rope_type %q)", family, cfg.RoPEScale, cfg.RoPEType)
	}
	return nil
}

// checkNoGemmaFields reports Gemma's fields on a config of another
// Llama-shaped family, whose classes have none of them; a sliding window
// only Mistral's expresses (on every layer, with one rotary base).
func checkNoGemmaFields(cfg model.Config, family string) error {
	switch {
	case cfg.PostNorms || cfg.EmbedScale || cfg.QueryScale != 0 || cfg.RoPELocalBase != 0:
		return fmt.Errorf("a %s model has no post_norms, embed_scale, query_scale or rope_local_base", family)
	case cfg.SlidingWindow != 0 && (family != Mistral && family != Phi3 || cfg.SlidingPattern != 0):
		return fmt.Errorf("a %s model here has no sliding window (sliding_window %d, sliding_pattern %d)", family, cfg.SlidingWindow, cfg.SlidingPattern)
	}
	return nil
}

func orName(v, def string) string {
	if v == "" {
		return def
	}
	return v
}
