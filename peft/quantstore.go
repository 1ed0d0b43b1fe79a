package peft

import (
	"fmt"
	"slices"
	"strings"

	"github.com/posttrainllm/posttrainllm/mlx"
	"github.com/posttrainllm/posttrainllm/model"
)

// Suffixes of the arrays that hold a quantized projection beside its
// packed ".weight", as MLX (mlx-lm's QuantizedLinear) names them.
const (
	ScalesSuffix = ".scales"
	BiasesSuffix = ".biases"
)

// QuantStem returns the name a quantized slot's scales and biases are
// stored under, without their suffix: blocks.0.attn.wq for
// blocks.0.attn.wq.weight.
func QuantStem(weightName string) string { return strings.TrimSuffix(weightName, ".weight") }

// IsQuantizedNamed reports whether named (a checkpoint's arrays by
// parameter name) holds any quantized projection of the layout specs,
// that is a "<stem>.scales" array beside a "<stem>.weight" parameter.
func IsQuantizedNamed(specs []model.ParamSpec, named map[string]*mlx.Array) bool {
	for _, s := range specs {
		if _, ok := named[QuantStem(s.Name)+ScalesSuffix]; ok {
			return true
		}
	}
	return false
}

// InferQuantization returns the bits and group size of a quantized
// [out, in] weight from the shapes MLX gives its packed weights
// [out, in·bits/32] and scales [out, in/groupSize], checking that they fit
// and that the packed weights are uint32.
func InferQuantization(name string, shape []int, packed, scales, biases *mlx.Array) (groupSize, bits int, err error) {
	if len(shape) != 2 {
		return 0, 0, fmt.Errorf("%s is quantized but has shape %v; only matrices are", name, shape)
	}
	out, in := shape[0], shape[1]
	if packed.Dtype() != mlx.Uint32 {
		return 0, 0, fmt.Errorf("%s: the packed weight is %v, want uint32", name, packed.Dtype())
	}
	ps, ss := packed.Shape(), scales.Shape()
	if len(ps) != 2 || len(ss) != 2 || ps[0] != out || ss[0] != out || ss[1] == 0 || in%ss[1] != 0 ||
		(ps[1]*32)%in != 0 || !slices.Equal(biases.Shape(), ss) {
		return 0, 0, fmt.Errorf("%s: packed weight %v, scales %v and biases %v do not quantize a %v matrix",
			name, ps, ss, biases.Shape(), shape)
	}
	groupSize, bits = in/ss[1], ps[1]*32/in
	if err := mlx.CheckQuantization(groupSize, bits); err != nil {
		return 0, 0, fmt.Errorf("%s: %w", name, err)
	}
	if !isFloatDtype(scales.Dtype()) || biases.Dtype() != scales.Dtype() {
		return 0, 0, fmt.Errorf("%s: scales %v and biases %v, want one float dtype (MLX's affine mode)", name, scales.Dtype(), biases.Dtype())
	}
	return groupSize, bits, nil
}

// isFloatDtype reports whether d is a float dtype MLX's affine scales take.
func isFloatDtype(d mlx.Dtype) bool {
	return d == mlx.Float32 || d == mlx.Float16 || d == mlx.BFloat16
}

// QuantizedFromNamed picks a quantized base out of named, a checkpoint's
// arrays by name: every parameter of specs by its name, and for each
// quantized slot (a "<stem>.scales" and "<stem>.biases" beside the packed
// "<stem>.weight") its scales and biases. It returns the layout and the
// frozen list (QuantizeBase's), whose arrays are named's own; nil and nil
// when named holds nothing quantized. Every slot must share one bits and
// group size and be a transformer-block projection, the token embedding
// or the output head (model.ParamSpec.Quantizable); named may hold nothing
// else.
func QuantizedFromNamed(file string, specs []model.ParamSpec, named map[string]*mlx.Array) (*Quantized, []*mlx.Array, error) {
	if !IsQuantizedNamed(specs, named) {
		return nil, nil, nil
	}
	q := &Quantized{Base: specs}
	frozen := make([]*mlx.Array, len(specs))
	var extra []*mlx.Array
	for i, s := range specs {
		a, ok := named[s.Name]
		if !ok {
			return nil, nil, fmt.Errorf("%s lacks %q", file, s.Name)
		}
		frozen[i] = a
		stem := QuantStem(s.Name)
		sc, quantized := named[stem+ScalesSuffix]
		if !quantized {
			if !slices.Equal(a.Shape(), s.Shape) {
				return nil, nil, fmt.Errorf("%s: %q has shape %v, this model needs %v", file, s.Name, a.Shape(), s.Shape)
			}
			continue
		}
		b, ok := named[stem+BiasesSuffix]
		if !ok {
			return nil, nil, fmt.Errorf("%s holds %q but lacks %q", file, stem+ScalesSuffix, stem+BiasesSuffix)
		}
		if !s.Quantizable() {
			return nil, nil, fmt.Errorf("%s: %q is quantized; only transformer-block projections, the token embedding and the output head may be", file, s.Name)
		}
		gs, bits, err := InferQuantization(s.Name, s.Shape, a, sc, b)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", file, err)
		}
		if len(q.Indices) == 0 {
			q.Bits, q.GroupSize = bits, gs
		} else if bits != q.Bits || gs != q.GroupSize {
			return nil, nil, fmt.Errorf("%s: %q is %d-bit in groups of %d, the others %d-bit in groups of %d; want one quantization",
				file, s.Name, bits, gs, q.Bits, q.GroupSize)
		}
		q.Indices = append(q.Indices, i)
		extra = append(extra, sc, b)
	}
	if want := q.Len(); len(named) != want {
		return nil, nil, fmt.Errorf("%s has %d arrays, the quantized model needs %d (%d parameters and the scales and biases of %d)",
			file, len(named), want, len(specs), len(q.Indices))
	}
	return q, append(frozen, extra...), nil
}

// Names returns the names of the frozen list's arrays, for saving it as a
// checkpoint QuantizedFromNamed reads back: the parameters' names, then
// "<stem>.scales" and "<stem>.biases" of each quantized slot.
func (q *Quantized) Names() []string {
	names := make([]string, 0, q.Len())
	for _, s := range q.Base {
		names = append(names, s.Name)
	}
	for _, i := range q.Indices {
		stem := QuantStem(q.Base[i].Name)
		names = append(names, stem+ScalesSuffix, stem+BiasesSuffix)
	}
	return names
}

// String describes the quantization for messages: "4-bit, groups of 64".
func (q *Quantized) String() string {
	return fmt.Sprintf("%d-bit, groups of %d", q.Bits, q.GroupSize)
}
