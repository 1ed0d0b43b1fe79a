package hf

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/posttrainllm/posttrainllm/mlx"
	"github.com/posttrainllm/posttrainllm/model"
)

// GGUFArchitectures are the general.architecture values of GGUF files
// that ReadGGUFConfig and LoadGGUF map: Llama (and the models llama.cpp
// converts as llama), Qwen2 and Qwen2.5, and Gemma 3 (its text model).
var GGUFArchitectures = []string{Llama, Qwen2, GGUFGemma3}

// GGUFGemma3 is Gemma 3's general.architecture.
const GGUFGemma3 = "gemma3"

// GGUFTypes are the tensor types LoadGGUF reads: float tensors as they
// are, and the quantized types (the legacy 32-value blocks and the
// K-quants) dequantized to float32 exactly as llama.cpp does.
var GGUFTypes = append([]mlx.GGMLType{mlx.GGMLF32, mlx.GGMLF16, mlx.GGMLBF16}, mlx.GGUFBlockTypes...)

// IsGGUF reports whether path is a regular file that starts with GGUF's
// magic bytes.
func IsGGUF(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	if info, err := f.Stat(); err != nil || !info.Mode().IsRegular() {
		return false
	}
	var magic [4]byte
	_, err = f.Read(magic[:])
	return err == nil && string(magic[:]) == "GGUF"
}

// GGUFModel is a GGUF file read as a model: the model and its parameters,
// and the tokenizer files a Hugging Face folder of it would hold
// (tokenizer.json, tokenizer_config.json, generation_config.json), made
// from the file's tokenizer.ggml.* metadata, or why they could not be made.
type GGUFModel struct {
	*Model
	Tokenizer    map[string][]byte
	TokenizerErr error
}

// ReadGGUFConfig reads the header of the GGUF file path (no tensor data)
// and maps it onto a model.Config in dtype ("" for float32) of the
// returned family. An architecture, tensor type or tensor it does not map
// is an error that names it.
func ReadGGUFConfig(path, dtype string) (model.Config, string, error) {
	h, err := mlx.ReadGGUFHeader(path)
	if err != nil {
		return model.Config{}, "", err
	}
	cfg, family, err := ggufConfig(h, dtype)
	if err != nil {
		return model.Config{}, "", fmt.Errorf("%s: %w", path, err)
	}
	return cfg, family, nil
}

// ggufConfig writes the config.json of a Hugging Face folder of the model
// the header h describes and parses it as a folder's: one mapping of
// configurations for folders and GGUF files.
func ggufConfig(h *mlx.GGUFHeader, dtype string) (model.Config, string, error) {
	arch, ok := h.Strings["general.architecture"]
	if !ok {
		return model.Config{}, "", fmt.Errorf("general.architecture is missing; want one of %q", GGUFArchitectures)
	}
	if !slices.Contains(GGUFArchitectures, arch) {
		return model.Config{}, "", fmt.Errorf("general.architecture %q is not supported; want one of %q", arch, GGUFArchitectures)
	}
	for _, t := range h.Tensors {
		if !slices.Contains(GGUFTypes, t.Type) {
			return model.Config{}, "", fmt.Errorf("tensor %q is %s; import reads %s", t.Name, t.Type, typeNames())
		}
		if _, err := ggufHFName(arch, t.Name); err != nil {
			return model.Config{}, "", err
		}
	}
	var cfg map[string]any
	var err error
	if arch == GGUFGemma3 {
		cfg, err = gemma3GGUFConfig(h)
	} else {
		cfg, err = ropeGGUFConfig(h, arch)
	}
	if err != nil {
		return model.Config{}, "", err
	}
	b, err := json.Marshal(cfg)
	if err != nil {
		return model.Config{}, "", err
	}
	return ParseConfig(b, dtype)
}

func typeNames() string {
	names := make([]string, len(GGUFTypes))
	for i, t := range GGUFTypes {
		names[i] = t.String()
	}
	return strings.Join(names, ", ")
}

// ropeGGUFConfig is the config.json (LlamaForCausalLM or
// Qwen2ForCausalLM) of a GGUF file of architecture arch, from its arch.*
// keys.
func ropeGGUFConfig(h *mlx.GGUFHeader, arch string) (map[string]any, error) {
	num := func(key string) (float64, bool) {
		v, ok := h.Numbers[arch+"."+key]
		return v, ok
	}
	var errs []string
	need := func(key string) int {
		v, ok := num(key)
		if !ok {
			errs = append(errs, arch+"."+key)
		}
		return int(v)
	}
	d, layers, hidden := need("embedding_length"), need("block_count"), need("feed_forward_length")
	heads, context := need("attention.head_count"), need("context_length")
	eps, ok := num("attention.layer_norm_rms_epsilon")
	if !ok {
		errs = append(errs, arch+".attention.layer_norm_rms_epsilon")
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("metadata %s missing", strings.Join(errs, ", "))
	}
	kv := heads
	if v, ok := num("attention.head_count_kv"); ok {
		kv = int(v)
	}
	if heads <= 0 || d%heads != 0 {
		return nil, fmt.Errorf("%s.attention.head_count = %d does not divide %s.embedding_length = %d", arch, heads, arch, d)
	}
	hd := d / heads
	if v, ok := num("expert_count"); ok && v > 0 {
		return nil, fmt.Errorf("%s.expert_count = %g: mixture-of-experts models are not supported", arch, v)
	}
	for _, key := range []string{"rope.dimension_count", "attention.key_length", "attention.value_length"} {
		if v, ok := num(key); ok && int(v) != hd {
			return nil, fmt.Errorf("%s.%s = %g is not supported; want the head size embedding_length/head_count = %d", arch, key, v, hd)
		}
	}
	theta := 10000.0
	if v, ok := num("rope.freq_base"); ok {
		theta = v
	}
	var scaling any
	switch kind := h.Strings[arch+".rope.scaling.type"]; kind {
	case "", "none":
	case "linear":
		f, ok := num("rope.scaling.factor")
		if !ok {
			return nil, fmt.Errorf("%s.rope.scaling.type linear needs %s.rope.scaling.factor", arch, arch)
		}
		scaling = map[string]any{"rope_type": "linear", "factor": float32Value(f)}
	default:
		return nil, fmt.Errorf("%s.rope.scaling.type %q is not supported; want linear or none", arch, kind)
	}
	vocab, tied := 0, true
	for _, t := range h.Tensors {
		switch t.Name {
		case "token_embd.weight":
			vocab = t.Shape[0]
		case "output.weight":
			tied = false
		}
	}
	cfg := map[string]any{
		"architectures": []string{"LlamaForCausalLM"}, "model_type": Llama,
		"vocab_size": vocab, "hidden_size": d, "intermediate_size": hidden, "num_hidden_layers": layers,
		"num_attention_heads": heads, "num_key_value_heads": kv, "max_position_embeddings": context,
		"rms_norm_eps": float32Value(eps), "rope_theta": float32Value(theta), "rope_scaling": scaling,
		"hidden_act": "silu", "tie_word_embeddings": tied, "attention_bias": false, "mlp_bias": false,
	}
	if arch == Qwen2 { // q, k and v biases always, no other bias
		cfg["architectures"], cfg["model_type"] = []string{"Qwen2ForCausalLM"}, Qwen2
		delete(cfg, "attention_bias")
		delete(cfg, "mlp_bias")
		cfg["use_sliding_window"] = false
	}
	return cfg, nil
}

// float32Value is v, a float32 of the file, as the shortest decimal that
// reads back as it: 1e-05 rather than 9.999999747378752e-06.
func float32Value(v float64) float64 {
	f, _ := strconv.ParseFloat(strconv.FormatFloat(v, 'g', -1, 32), 64)
	return f
}

var ggufLayerName = regexp.MustCompile(`^blk\.(\d+)\.(.+)$`)

// ggufHFName maps a llama.cpp tensor name of a model of architecture arch
// to Hugging Face's name (LlamaForCausalLM's, which Qwen2ForCausalLM
// shares, with q, k and v biases).
func ggufHFName(arch, name string) (string, error) {
	if arch == GGUFGemma3 || arch == Gemma3 {
		return gemma3GGUFName(name)
	}
	switch name {
	case "token_embd.weight":
		return "model.embed_tokens.weight", nil
	case "output_norm.weight":
		return "model.norm.weight", nil
	case "output.weight":
		return "lm_head.weight", nil
	case "rope_freqs.weight":
		return "", fmt.Errorf("tensor %q (Llama 3.1-style rope frequency factors) is not supported", name)
	}
	m := ggufLayerName.FindStringSubmatch(name)
	if m != nil {
		per := map[string]string{
			"attn_norm.weight": "input_layernorm.weight", "ffn_norm.weight": "post_attention_layernorm.weight",
			"attn_q.weight": "self_attn.q_proj.weight", "attn_k.weight": "self_attn.k_proj.weight",
			"attn_v.weight": "self_attn.v_proj.weight", "attn_output.weight": "self_attn.o_proj.weight",
			"ffn_gate.weight": "mlp.gate_proj.weight", "ffn_up.weight": "mlp.up_proj.weight",
			"ffn_down.weight": "mlp.down_proj.weight",
		}
		if arch == Qwen2 {
			per["attn_q.bias"], per["attn_k.bias"], per["attn_v.bias"] = "self_attn.q_proj.bias", "self_attn.k_proj.bias", "self_attn.v_proj.bias"
		}
		if hf, ok := per[m[2]]; ok {
			return "model.layers." + m[1] + "." + hf, nil
		}
	}
	return "", fmt.Errorf("tensor %q is not a parameter of a %s model this import maps", name, arch)
}

// LoadGGUF reads the GGUF file path into a model whose compute dtype is
// dtype ("" for float32), as Load reads a folder: F32, F16 and BF16
// tensors as they are, Q4_0, Q4_1 and Q8_0 tensors dequantized to
// float32 exactly as llama.cpp does, then cast to the model's parameter
// dtype; for llama files, llama.cpp's interleaving of each head's q and k
// rows for its rotary embedding is undone, so the parameters are those of
// the Hugging Face model the file was converted from. The tokenizer files are made
// from the file's metadata (see GGUFModel).
func LoadGGUF(path, dtype string) (*GGUFModel, error) {
	h, err := mlx.ReadGGUFHeader(path)
	if err != nil {
		return nil, err
	}
	cfg, family, err := ggufConfig(h, dtype)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	m, err := model.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	f, err := mlx.LoadGGUF(path)
	if err != nil {
		return nil, err
	}
	defer f.Free()
	out := &GGUFModel{}
	out.Tokenizer, out.TokenizerErr = ggufTokenizerFiles(f.Metadata, cfg.VocabSize)
	if out.TokenizerErr != nil {
		out.TokenizerErr = fmt.Errorf("%s: %w", path, out.TokenizerErr)
	}
	err = mlx.Do(func() error {
		s := mlx.NewScope()
		defer s.Close()
		t := tensors{}
		for name, gt := range f.Tensors {
			hfName, err := ggufHFName(family, name)
			if err != nil {
				return err
			}
			a, err := ggufWeight(gt, family, m.Config)
			if err != nil {
				return err
			}
			t[hfName] = a
		}
		params, err := assemble(path, family, m, t, family == Gemma3)
		if err != nil {
			return err
		}
		s.Keep(params...)
		out.Model = &Model{Family: family, Model: m, Params: params}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// ggufWeight is one tensor of the file as a float array in the model's
// parameter dtype (float tensors keep theirs until assemble casts them),
// with a llama model's q and k rows put back in Hugging Face's order
// (llama.cpp keeps Qwen2's as they are, for its rotate-half RoPE). It
// evaluates the result, so each quantized tensor's float32 copy is freed
// before the next is made.
func ggufWeight(t *mlx.GGUFTensor, arch string, cfg model.Config) (*mlx.Array, error) {
	a := t.Data
	if t.Quantized() || t.Raw != nil {
		var err error
		if a, err = t.Float32(); err != nil {
			return nil, err
		}
	}
	switch {
	case arch != Llama:
	case strings.HasSuffix(t.Info.Name, ".attn_q.weight"):
		a = unpermuteRoPE(a, cfg.Heads)
	case strings.HasSuffix(t.Info.Name, ".attn_k.weight"):
		a = unpermuteRoPE(a, cfg.KVHeadCount())
	}
	if t.Quantized() || t.Raw != nil {
		a = mlx.AsType(a, cfg.ParamDtype())
	}
	if err := mlx.Eval(a); err != nil {
		return nil, fmt.Errorf("tensor %q: %w", t.Info.Name, err)
	}
	return a, nil
}

// unpermuteRoPE undoes convert_hf_to_gguf.py's permutation of a q or k
// projection [heads·hd, in]: it stores each head's rows as
// reshape(heads, 2, hd/2, in).swapaxes(1, 2), interleaving the two
// rotary halves for llama.cpp's rotation of adjacent pairs; Hugging Face's
// (and this model's) rotate-half RoPE wants the halves back.
func unpermuteRoPE(w *mlx.Array, heads int) *mlx.Array {
	rows, in := w.Dim(0), w.Dim(1)
	x := mlx.Reshape(w, heads, rows/heads/2, 2, in)
	return mlx.Reshape(mlx.SwapAxes(x, 1, 2), rows, in)
}
