package hf

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/posttrainllm/posttrainllm/model"
)

// Families this package maps, by their config.json model_type.
const (
	GPT2    = "gpt2"
	Llama   = "llama"
	Mistral = "mistral"
	Qwen2   = "qwen2"
	Qwen3   = "qwen3"
	Phi3    = "phi3"
	// Gemma3 is the text-only Gemma 3 (Gemma3ForCausalLM).
	Gemma3 = "gemma3_text"
)

// familyNames lists the model_types ParseConfig maps, for its errors.
const familyNames = `"gpt2", "llama", "mistral", "qwen2", "qwen3", "phi3" or "gemma3_text"`

// ConfigFile is the name of a folder's model configuration.
const ConfigFile = "config.json"

// hfConfig is the union of the config.json fields of the supported
// families that the mapping reads. Pointers tell an absent field from a
// zero one where the default is not zero.
type hfConfig struct {
	ModelType     string   `json:"model_type"`
	Architectures []string `json:"architectures"`
	VocabSize     int      `json:"vocab_size"`
	TieEmbeddings *bool    `json:"tie_word_embeddings"`

	// Quantized checkpoints (transformers, and MLX's converter) say so here.
	QuantizationConfig json.RawMessage `json:"quantization_config"`
	Quantization       json.RawMessage `json:"quantization"`

	// GPT-2
	NEmbd                int      `json:"n_embd"`
	NLayer               int      `json:"n_layer"`
	NHead                int      `json:"n_head"`
	NPositions           int      `json:"n_positions"`
	NInner               *int     `json:"n_inner"`
	ActivationFunction   string   `json:"activation_function"`
	LayerNormEpsilon     *float64 `json:"layer_norm_epsilon"`
	ScaleAttnWeights     *bool    `json:"scale_attn_weights"`
	ScaleAttnByLayerIdx  bool     `json:"scale_attn_by_inverse_layer_idx"`
	ReorderAndUpcastAttn bool     `json:"reorder_and_upcast_attn"`
	AddCrossAttention    bool     `json:"add_cross_attention"`

	// Llama and its relatives (Mistral, Qwen2, Qwen3, Phi-3)
	HiddenSize            int          `json:"hidden_size"`
	IntermediateSize      int          `json:"intermediate_size"`
	NumHiddenLayers       int          `json:"num_hidden_layers"`
	NumAttentionHeads     int          `json:"num_attention_heads"`
	NumKeyValueHeads      *int         `json:"num_key_value_heads"`
	MaxPositionEmbeddings int          `json:"max_position_embeddings"`
	RMSNormEps            *float64     `json:"rms_norm_eps"`
	RoPETheta             *float64     `json:"rope_theta"`
	RoPEScaling           *ropeScaling `json:"rope_scaling"`
	HiddenAct             string       `json:"hidden_act"`
	AttentionBias         *bool        `json:"attention_bias"`
	MLPBias               bool         `json:"mlp_bias"`
	HeadDim               *int         `json:"head_dim"`
	// Sliding-window attention: Mistral's and Phi-3's sliding_window, and
	// Qwen's behind use_sliding_window from layer max_window_layers on (or
	// layer_types). A raw value tells an absent field from null.
	SlidingWindow       json.RawMessage `json:"sliding_window"`
	UseSlidingWindow    bool            `json:"use_sliding_window"`
	MaxWindowLayers     *int            `json:"max_window_layers"`
	LayerTypes          []string        `json:"layer_types"`
	PartialRotaryFactor *float64        `json:"partial_rotary_factor"`

	// Gemma 3
	HiddenActivation      string          `json:"hidden_activation"`
	QueryPreAttnScalar    *float64        `json:"query_pre_attn_scalar"`
	RoPELocalBaseFreq     *float64        `json:"rope_local_base_freq"`
	SlidingWindowPattern  *int            `json:"sliding_window_pattern"`
	FinalLogitSoftcapping json.RawMessage `json:"final_logit_softcapping"`
	AttnLogitSoftcapping  json.RawMessage `json:"attn_logit_softcapping"`
}

// ropeScaling is config.json's rope_scaling: the type (rope_type, or type
// in older files) and the fields of the types this package maps.
type ropeScaling struct {
	Type           string  `json:"type"`
	RoPEType       string  `json:"rope_type"`
	Factor         float64 `json:"factor"`
	LowFreqFactor  float64 `json:"low_freq_factor"`
	HighFreqFactor float64 `json:"high_freq_factor"`
	OriginalMax    int     `json:"original_max_position_embeddings"`
}

// ReadConfig reads DIR/config.json and maps it onto a model.Config in
// dtype ("" for float32). It returns the family (GPT2, Llama, Mistral,
// Qwen2, Qwen3 or Phi3), which the config also records (model.Config's
// Family) so that export writes the same architecture back. A field
// that asks for something the model cannot compute (a quantized
// checkpoint other than MLX's affine one, an unknown model_type, a
// rope_scaling type other than linear, …) is an error that names it. An
// MLX-quantized folder (ReadQuantization) maps to the same model.Config as
// its float original.
func ReadConfig(dir, dtype string) (model.Config, string, error) {
	path := filepath.Join(dir, ConfigFile)
	b, err := os.ReadFile(path)
	if err != nil {
		return model.Config{}, "", fmt.Errorf("hf: %w", err)
	}
	cfg, family, err := ParseConfig(b, dtype)
	if err != nil {
		return model.Config{}, "", fmt.Errorf("%s: %w", path, err)
	}
	return cfg, family, nil
}

// ParseConfig is ReadConfig on config.json's bytes.
func ParseConfig(b []byte, dtype string) (model.Config, string, error) {
	var h hfConfig
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&h); err != nil {
		return model.Config{}, "", fmt.Errorf("not a valid config.json: %w", err)
	}
	quant, err := parseQuantization(h)
	if err != nil {
		return model.Config{}, "", err
	}
	if quant != nil && h.ModelType == GPT2 {
		return model.Config{}, "", fmt.Errorf("quantization: MLX-quantized %s folders are not supported (only the Llama-shaped families); use the unquantized weights", GPT2)
	}
	if dtype == "" {
		dtype = "float32"
	}
	var cfg model.Config
	switch h.ModelType {
	case GPT2:
		cfg, err = gpt2Config(h)
	case Llama, Mistral, Qwen2, Qwen3, Phi3:
		cfg, err = ropeFamilyConfig(h)
	case Gemma3:
		cfg, err = gemma3Config(h)
	case "":
		return model.Config{}, "", fmt.Errorf("model_type is missing; want %s", familyNames)
	default:
		return model.Config{}, "", fmt.Errorf("model_type %q is not supported; want %s", h.ModelType, familyNames)
	}
	if err != nil {
		return model.Config{}, "", err
	}
	cfg.Dtype = dtype
	cfg.Family = h.ModelType
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return model.Config{}, "", err
	}
	return cfg, h.ModelType, nil
}

func orDefault[T any](p *T, def T) T {
	if p == nil {
		return def
	}
	return *p
}

// gpt2Config maps GPT2LMHeadModel's configuration.
func gpt2Config(h hfConfig) (model.Config, error) {
	var gelu string
	switch h.ActivationFunction {
	case "gelu_new", "gelu_pytorch_tanh", "": // transformers' default is gelu_new
		gelu = model.GELUTanh
	case "gelu":
		gelu = model.GELUExact
	default:
		return model.Config{}, fmt.Errorf("activation_function %q is not supported; want gelu_new, gelu_pytorch_tanh or gelu", h.ActivationFunction)
	}
	switch {
	case !orDefault(h.ScaleAttnWeights, true):
		return model.Config{}, fmt.Errorf("scale_attn_weights = false is not supported")
	case h.ScaleAttnByLayerIdx:
		return model.Config{}, fmt.Errorf("scale_attn_by_inverse_layer_idx = true is not supported")
	case h.ReorderAndUpcastAttn:
		return model.Config{}, fmt.Errorf("reorder_and_upcast_attn = true is not supported")
	case h.AddCrossAttention:
		return model.Config{}, fmt.Errorf("add_cross_attention = true is not supported (decoder-only models only)")
	case !orDefault(h.TieEmbeddings, true):
		return model.Config{}, fmt.Errorf("tie_word_embeddings = false is not supported for gpt2")
	}
	cfg := model.Config{
		VocabSize: h.VocabSize, DModel: h.NEmbd, Layers: h.NLayer, Heads: h.NHead, Context: h.NPositions,
		MLPRatio: 4, TiedEmbeddings: true, NormEps: orDefault(h.LayerNormEpsilon, 1e-5),
		Norm: model.NormLayer, Bias: true, Positions: model.PositionsLearned, MLP: model.MLPGELU, GELU: gelu,
	}
	if h.NInner != nil && *h.NInner != 4*h.NEmbd {
		cfg.MLPHidden = *h.NInner
	}
	return cfg, nil
}
