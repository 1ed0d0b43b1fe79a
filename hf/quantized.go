package hf

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/posttrainllm/posttrainllm/mlx"
	"github.com/posttrainllm/posttrainllm/model"
)

// Quantization is the affine quantization of an MLX-quantized folder
// (config.json's "quantization", as mlx_lm.convert -q writes it): each
// quantized Linear stored as its packed uint32 "weight", "scales" and
// "biases", groups of GroupSize values along the input side sharing a
// scale and a bias.
type Quantization struct {
	GroupSize int `json:"group_size"`
	Bits      int `json:"bits"`
}

// QuantizedParams are the projections a loaded model holds quantized:
// Model.Params[Indices[k]] is the packed uint32 weight of the k-th, whose
// scales and biases (in the model's parameter dtype) are Scales[k] and
// Biases[k]. All share Bits and GroupSize.
type QuantizedParams struct {
	Quantization
	Indices        []int
	Scales, Biases []*mlx.Array
}

// mlxQuantization is the part of config.json's quantization (or
// quantization_config) this package reads: mlx-lm's top-level settings,
// beside which it may hold per-layer entries, and transformers'
// quant_method, which marks the other formats.
type mlxQuantization struct {
	GroupSize   *int   `json:"group_size"`
	Bits        *int   `json:"bits"`
	Mode        string `json:"mode"`
	QuantMethod string `json:"quant_method"`
}

// ReadQuantization reads the quantization of the folder dir's config.json:
// nil for float weights. Formats other than MLX's affine one are errors
// that name them.
func ReadQuantization(dir string) (*Quantization, error) {
	path := filepath.Join(dir, ConfigFile)
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("hf: %w", err)
	}
	var h hfConfig
	if err := json.NewDecoder(bytes.NewReader(b)).Decode(&h); err != nil {
		return nil, fmt.Errorf("%s: not a valid config.json: %w", path, err)
	}
	q, err := parseQuantization(h)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return q, nil
}

// parseQuantization maps config.json's quantization, or failing it a
// quantization_config without a quant_method (mlx-lm writes both, the
// same), onto a Quantization; nil when neither is set.
func parseQuantization(h hfConfig) (*Quantization, error) {
	field, raw := "quantization", h.Quantization
	if isNull(raw) {
		field, raw = "quantization_config", h.QuantizationConfig
	}
	if isNull(raw) {
		return nil, nil
	}
	var q mlxQuantization
	if err := json.Unmarshal(raw, &q); err != nil {
		return nil, fmt.Errorf("%s: %w", field, err)
	}
	switch {
	case q.QuantMethod != "":
		return nil, fmt.Errorf("%s: quant_method %q checkpoints are not supported; use the unquantized (float32, float16 or bfloat16) weights, or an MLX-quantized folder (mlx_lm.convert -q)", field, q.QuantMethod)
	case q.Mode != "" && q.Mode != "affine":
		return nil, fmt.Errorf("%s: mode %q is not supported; want MLX's affine quantization", field, q.Mode)
	case q.GroupSize == nil || q.Bits == nil:
		return nil, fmt.Errorf("%s: want group_size and bits (MLX's affine quantization), got %s", field, raw)
	}
	if err := mlx.CheckQuantization(*q.GroupSize, *q.Bits); err != nil {
		return nil, fmt.Errorf("%s: %w", field, err)
	}
	return &Quantization{GroupSize: *q.GroupSize, Bits: *q.Bits}, nil
}

// isNull reports whether a raw JSON field is absent or null.
func isNull(raw json.RawMessage) bool {
	return len(raw) == 0 || string(bytes.TrimSpace(raw)) == "null"
}

// LoadQuantized is Load for an MLX-quantized folder that keeps the
// quantized transformer-block projections, token embedding and untied
// output head quantized (Model.Quant) instead of dequantizing them, so
// adapters train over them as they were published and the model never
// forms the float embedding table (it gathers and dequantizes the rows it
// looks up, as mlx-lm's QuantizedEmbedding does). Everything else (norms,
// tensors quantized with other bits or groups than the folder's default,
// and those the family stores fused, transposed or with another number of
// rows than the model's padded vocabulary) is dequantized to the model's
// parameter dtype. A float folder loads as Load loads it.
func LoadQuantized(dir, dtype string) (*Model, error) {
	var out *Model
	err := mlx.Do(func() error {
		var err error
		out, err = loadFolder(dir, dtype, true)
		return err
	})
	return out, err
}

// quantGroup is one quantized tensor of a folder: its packed weight,
// scales and biases, and the bits and group size its shapes give.
type quantGroup struct {
	packed, scales, biases *mlx.Array
	groupSize, bits        int
}

// dequantizeTensors replaces each quantized tensor of t (a uint32
// "<stem>.weight" with "<stem>.scales" and "<stem>.biases") by its
// dequantized "<stem>.weight", a lazy graph that is only computed where
// it is used, and returns the groups by that dequantized array, so that
// assemble can tell a parameter that is a quantized tensor as it is. The
// shapes leave the group size open (the input side is not stored): the
// folder's default q is tried first, as mlx-lm writes it for every tensor
// but those its per-layer settings name.
func dequantizeTensors(src string, t tensors, q Quantization) (map[*mlx.Array]quantGroup, error) {
	groups := map[*mlx.Array]quantGroup{}
	for name, w := range t {
		if !strings.HasSuffix(name, ".weight") || w.Dtype() != mlx.Uint32 {
			continue
		}
		stem := strings.TrimSuffix(name, ".weight")
		sc, okS := t[stem+".scales"]
		b, okB := t[stem+".biases"]
		if !okS || !okB {
			return nil, fmt.Errorf("%s: tensor %q is packed (uint32) but %q or %q is missing", src, name, stem+".scales", stem+".biases")
		}
		ps, ss := w.Shape(), sc.Shape()
		if len(ps) != 2 || len(ss) != 2 || ps[0] != ss[0] || ss[1] == 0 || (ps[1]*32)%ss[1] != 0 {
			return nil, fmt.Errorf("%s: %q: packed %v and scales %v are not an MLX-quantized matrix", src, stem, ps, ss)
		}
		// in = groups × groupSize = packed × 32 / bits: try each group size.
		g := quantGroup{packed: w, scales: sc, biases: b}
		for _, gs := range append([]int{q.GroupSize}, mlx.QuantGroupSizes...) {
			in := ss[1] * gs
			if (ps[1]*32)%in == 0 && mlx.CheckQuantization(gs, ps[1]*32/in) == nil {
				g.groupSize, g.bits = gs, ps[1]*32/in
				break
			}
		}
		if g.bits == 0 {
			return nil, fmt.Errorf("%s: %q: packed %v and scales %v fit no MLX bits and group size", src, stem, ps, ss)
		}
		d := mlx.Dequantize(w, sc, b, g.groupSize, g.bits)
		delete(t, stem+".scales")
		delete(t, stem+".biases")
		t[name] = d
		groups[d] = g
	}
	for name, a := range t {
		if !isFloat(a.Dtype()) {
			return nil, fmt.Errorf("%s: tensor %q is %v; want float weights or MLX-quantized ones (uint32 with scales and biases)", src, name, a.Dtype())
		}
	}
	return groups, nil
}

// keepQuantized picks, among m's parameters mapped from groups'
// dequantized arrays, those that stay quantized: transformer-block
// projections, the token embedding and an untied output head
// (model.ParamSpec.Quantizable) that are a folder tensor as it is (not
// split, fused, transposed or padded), quantized with q's bits and group
// size. named holds the
// mapped arrays in Specs order; the picked ones are replaced there by
// their packed weights, and returned with their scales and biases cast to
// the parameter dtype; nil when none is picked.
func keepQuantized(m *model.Transformer, named []*mlx.Array, groups map[*mlx.Array]quantGroup, q Quantization) *QuantizedParams {
	out := &QuantizedParams{Quantization: q}
	for i, spec := range m.Specs {
		g, ok := groups[named[i]]
		if !ok || !spec.Quantizable() || g.bits != q.Bits || g.groupSize != q.GroupSize {
			continue
		}
		dt := m.Config.ParamDtype()
		out.Indices = append(out.Indices, i)
		out.Scales = append(out.Scales, mlx.AsType(g.scales, dt))
		out.Biases = append(out.Biases, mlx.AsType(g.biases, dt))
		named[i] = g.packed
	}
	if len(out.Indices) == 0 {
		return nil
	}
	return out
}
