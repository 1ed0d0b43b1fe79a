package hf

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"

	"github.com/posttrainllm/posttrainllm/model"
)

// Families this package maps, by their config.json model_type.
const (
	GPT2  = "gpt2"
	Llama = "llama"
)

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
	NEmbd                 int      `json:"n_embd"`
	NLayer                int      `json:"n_layer"`
	NHead                 int      `json:"n_head"`
	NPositions            int      `json:"n_positions"`
	NInner                *int     `json:"n_inner"`
	ActivationFunction    string   `json:"activation_function"`
	LayerNormEpsilon      *float64 `json:"layer_norm_epsilon"`
	ScaleAttnWeights      *bool    `json:"scale_attn_weights"`
	ScaleAttnByLayerIdx   bool     `json:"scale_attn_by_inverse_layer_idx"`
	ReorderAndUpcastAttn  bool     `json:"reorder_and_upcast_attn"`
	AddCrossAttention     bool     `json:"add_cross_attention"`
	HiddenSize            int      `json:"hidden_size"`
	IntermediateSize      int      `json:"intermediate_size"`
	NumHiddenLayers       int      `json:"num_hidden_layers"`
	NumAttentionHeads     int      `json:"num_attention_heads"`
	NumKeyValueHeads      int      `json:"num_key_value_heads"`
	MaxPositionEmbeddings int      `json:"max_position_embeddings"`
	RMSNormEps            *float64 `json:"rms_norm_eps"`
	RoPETheta             *float64 `json:"rope_theta"`
	RoPEScaling           *struct {
		Type     string  `json:"type"`
		RoPEType string  `json:"rope_type"`
		Factor   float64 `json:"factor"`
	} `json:"rope_scaling"`
	HiddenAct     string `json:"hidden_act"`
	AttentionBias bool   `json:"attention_bias"`
	MLPBias       bool   `json:"mlp_bias"`
	HeadDim       int    `json:"head_dim"`
}

// ReadConfig reads DIR/config.json and maps it onto a model.Config in
// dtype ("" for float32). It returns the family (GPT2 or Llama). A field
// that asks for something the model cannot compute (a quantized
// checkpoint, an unknown model_type, a rope_scaling type other than
// linear, …) is an error that names it.
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
	if len(h.QuantizationConfig) > 0 && string(h.QuantizationConfig) != "null" {
		return model.Config{}, "", fmt.Errorf("quantization_config: quantized checkpoints are not supported; use the unquantized (float32, float16 or bfloat16) weights")
	}
	if len(h.Quantization) > 0 && string(h.Quantization) != "null" {
		return model.Config{}, "", fmt.Errorf("quantization: quantized checkpoints are not supported; use the unquantized (float32, float16 or bfloat16) weights")
	}
	if dtype == "" {
		dtype = "float32"
	}
	var cfg model.Config
	var err error
	switch h.ModelType {
	case GPT2:
		cfg, err = gpt2Config(h)
	case Llama:
		cfg, err = llamaConfig(h)
	case "":
		return model.Config{}, "", fmt.Errorf("model_type is missing; want %q or %q", GPT2, Llama)
	default:
		return model.Config{}, "", fmt.Errorf("model_type %q is not supported; want %q or %q", h.ModelType, GPT2, Llama)
	}
	if err != nil {
		return model.Config{}, "", err
	}
	cfg.Dtype = dtype
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

// llamaConfig maps LlamaForCausalLM's configuration.
func llamaConfig(h hfConfig) (model.Config, error) {
	switch {
	case h.HiddenAct != "" && h.HiddenAct != "silu":
		return model.Config{}, fmt.Errorf("hidden_act %q is not supported; want silu", h.HiddenAct)
	case h.AttentionBias:
		return model.Config{}, fmt.Errorf("attention_bias = true is not supported")
	case h.MLPBias:
		return model.Config{}, fmt.Errorf("mlp_bias = true is not supported")
	case h.NumAttentionHeads > 0 && h.HeadDim != 0 && h.HeadDim*h.NumAttentionHeads != h.HiddenSize:
		return model.Config{}, fmt.Errorf("head_dim = %d is not supported; want hidden_size/num_attention_heads = %d",
			h.HeadDim, h.HiddenSize/h.NumAttentionHeads)
	}
	cfg := model.Config{
		VocabSize: h.VocabSize, DModel: h.HiddenSize, Layers: h.NumHiddenLayers, Heads: h.NumAttentionHeads,
		KVHeads: h.NumKeyValueHeads, Context: h.MaxPositionEmbeddings, MLPRatio: 4, MLPHidden: h.IntermediateSize,
		TiedEmbeddings: orDefault(h.TieEmbeddings, false), NormEps: orDefault(h.RMSNormEps, 1e-6),
		RoPEBase: orDefault(h.RoPETheta, 10000), Norm: model.NormRMS, Positions: model.PositionsRoPE, MLP: model.MLPSwiGLU,
	}
	if cfg.KVHeads == cfg.Heads {
		cfg.KVHeads = 0
	}
	if h.IntermediateSize <= 0 {
		return model.Config{}, fmt.Errorf("intermediate_size = %d, want > 0", h.IntermediateSize)
	}
	if s := h.RoPEScaling; s != nil {
		kind := s.RoPEType
		if kind == "" {
			kind = s.Type
		}
		if kind != "linear" {
			return model.Config{}, fmt.Errorf("rope_scaling type %q is not supported; want linear (or no rope_scaling)", kind)
		}
		if !(s.Factor > 0) || math.IsInf(s.Factor, 0) {
			return model.Config{}, fmt.Errorf("rope_scaling factor = %g, want a finite value > 0", s.Factor)
		}
		cfg.RoPEScale = s.Factor
	}
	return cfg, nil
}

// Family reports which Hugging Face family cfg is an instance of, or an
// error naming the field that keeps it from being one: export writes only
// models that transformers computes identically.
func Family(cfg model.Config) (string, error) {
	cfg = cfg.WithDefaults()
	if cfg.EmbedNorm {
		return "", fmt.Errorf("embed_norm = true has no Hugging Face GPT-2 or Llama counterpart")
	}
	switch {
	case cfg.Norm == model.NormLayer && cfg.Positions == model.PositionsLearned:
		switch {
		case !cfg.Bias:
			return "", fmt.Errorf("a GPT-2 model needs bias = true")
		case cfg.MLP == model.MLPSwiGLU:
			return "", fmt.Errorf("a GPT-2 model needs mlp = gelu, not %q", cfg.MLP)
		case cfg.KVHeads != 0 && cfg.KVHeads != cfg.Heads:
			return "", fmt.Errorf("a GPT-2 model needs kv_heads = heads, not %d", cfg.KVHeads)
		case !cfg.TiedEmbeddings:
			return "", fmt.Errorf("a GPT-2 model needs tied_embeddings = true")
		}
		return GPT2, nil
	case cfg.Norm != model.NormLayer && cfg.Positions != model.PositionsLearned && cfg.MLP == model.MLPSwiGLU:
		if cfg.Bias {
			return "", fmt.Errorf("a Llama model needs bias = false")
		}
		return Llama, nil
	}
	return "", fmt.Errorf("model config (norm %q, positions %q, mlp %q) is neither GPT-2 (norm layer, positions learned, mlp gelu) nor Llama (norm rms, positions rope, mlp swiglu)",
		orName(cfg.Norm, model.NormRMS), orName(cfg.Positions, model.PositionsRoPE), orName(cfg.MLP, model.MLPGELU))
}

func orName(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

// exportConfig is the config.json written for cfg of family.
func exportConfig(cfg model.Config, family string) map[string]any {
	dtype := cfg.ParamDtype().String()
	switch family {
	case GPT2:
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
	default:
		out := map[string]any{
			"architectures": []string{"LlamaForCausalLM"}, "model_type": Llama,
			"vocab_size": cfg.VocabSize, "hidden_size": cfg.DModel, "intermediate_size": cfg.Hidden(),
			"num_hidden_layers": cfg.Layers, "num_attention_heads": cfg.Heads,
			"num_key_value_heads": cfg.KVHeadCount(), "max_position_embeddings": cfg.Context,
			"rms_norm_eps": cfg.NormEps, "rope_theta": cfg.RoPEBase, "hidden_act": "silu",
			"tie_word_embeddings": cfg.TiedEmbeddings, "attention_bias": false, "mlp_bias": false,
			"rope_scaling": nil, "torch_dtype": dtype,
		}
		if cfg.RoPEScale != 0 && cfg.RoPEScale != 1 {
			out["rope_scaling"] = map[string]any{"rope_type": "linear", "factor": cfg.RoPEScale}
		}
		return out
	}
}
