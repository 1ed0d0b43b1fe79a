package peft

import (
	"fmt"
	"slices"
	"strings"

	"github.com/posttrainllm/posttrainllm/mlx"
	"github.com/posttrainllm/posttrainllm/model"
)

// Quantized is a frozen base whose transformer-block projections are held
// quantized (MLX's affine mode): the frozen parameter list keeps the
// model's layout, each quantized slot holding the packed weights, followed
// by the scales and biases of every quantized slot in Indices order. The
// embeddings, norms and biases stay as they were. Adapters train over it
// through quantized matmuls (Adapter.Linears); Dequantize gives back a
// float list in the model's layout, for fusing and evaluation.
type Quantized struct {
	Bits, GroupSize int
	// Indices are the quantized slots (model Specs order).
	Indices []int
	// Base is the model's parameter layout.
	Base []model.ParamSpec
}

// QuantizeBase quantizes every transformer-block projection weight of
// base (laid out as specs) whose input side is a multiple of groupSize,
// and returns the layout and the frozen list; the caller owns the new
// arrays (the packed weights, scales and biases) and still owns base,
// whose other entries the list shares.
func QuantizeBase(specs []model.ParamSpec, base []*mlx.Array, groupSize, bits int) (*Quantized, []*mlx.Array, error) {
	if err := mlx.CheckQuantization(groupSize, bits); err != nil {
		return nil, nil, fmt.Errorf("peft: %w", err)
	}
	if len(base) != len(specs) {
		return nil, nil, fmt.Errorf("peft: got %d base arrays, the model has %d parameters", len(base), len(specs))
	}
	q := &Quantized{Bits: bits, GroupSize: groupSize, Base: specs}
	for i, s := range specs {
		if s.Kind == model.Matrix && len(s.Shape) == 2 && isBlockWeight(s.Name) && s.Shape[1]%groupSize == 0 {
			q.Indices = append(q.Indices, i)
		}
	}
	if len(q.Indices) == 0 {
		return nil, nil, fmt.Errorf("peft: no projection of this model has an input side divisible by the group size %d", groupSize)
	}
	frozen := slices.Clone(base)
	var extra, created []*mlx.Array
	err := mlx.Do(func() error {
		s := mlx.NewScope()
		defer s.Close()
		for _, i := range q.Indices {
			w, sc, b := mlx.Quantize(base[i], groupSize, bits)
			if err := mlx.Eval(w, sc, b); err != nil {
				return fmt.Errorf("peft: quantizing %s: %w", specs[i].Name, err)
			}
			frozen[i] = w
			extra = append(extra, sc, b)
			created = append(created, w, sc, b)
			s.Keep(w, sc, b)
		}
		return nil
	})
	if err != nil {
		mlx.Free(created...)
		return nil, nil, err
	}
	return q, append(frozen, extra...), nil
}

// isBlockWeight reports whether a parameter name is a transformer block's
// weight (blocks.3.attn.wq.weight).
func isBlockWeight(name string) bool {
	return strings.HasPrefix(name, "blocks.") && strings.HasSuffix(name, ".weight")
}

// Len is the length of the frozen list: the model's parameters, then a
// scales and a biases array per quantized slot.
func (q *Quantized) Len() int { return len(q.Base) + 2*len(q.Indices) }

// extras returns the scales and biases of the k-th quantized slot.
func (q *Quantized) extras(frozen []*mlx.Array, k int) (scales, biases *mlx.Array) {
	n := len(q.Base)
	return frozen[n+2*k], frozen[n+2*k+1]
}

// check refuses a frozen list of the wrong length.
func (q *Quantized) check(frozen []*mlx.Array) error {
	if len(frozen) != q.Len() {
		return fmt.Errorf("peft: got %d frozen arrays, the quantized base has %d (%d parameters and the scales and biases of %d)",
			len(frozen), q.Len(), len(q.Base), len(q.Indices))
	}
	return nil
}

// Dequantize returns the float parameters in the model's layout, the
// quantized slots dequantized (in the scales' dtype, the base's), as an
// unevaluated graph; the other entries are frozen's own arrays.
func (q *Quantized) Dequantize(frozen []*mlx.Array) []*mlx.Array {
	out := slices.Clone(frozen[:min(len(frozen), len(q.Base))])
	if err := q.check(frozen); err != nil {
		for i := range out {
			out[i] = mlx.ErrorArray(err)
		}
		return out
	}
	for k, i := range q.Indices {
		sc, b := q.extras(frozen, k)
		out[i] = mlx.Dequantize(frozen[i], sc, b, q.GroupSize, q.Bits)
	}
	return out
}

// quantizedMatmul is x·Wᵀ over the k-th quantized slot's arrays
// [packed, scales, biases], in x's dtype.
func (q *Quantized) quantizedMatmul(x *mlx.Array, a []*mlx.Array) *mlx.Array {
	dt := x.Dtype()
	if sd := a[1].Dtype(); sd != dt {
		x = mlx.AsType(x, sd)
	}
	// The quantized arrays are frozen: MLX has no gradient for them, and a
	// checkpointed block differentiates every input it is given.
	w, sc, b := mlx.StopGradient(a[0]), mlx.StopGradient(a[1]), mlx.StopGradient(a[2])
	return mlx.AsType(mlx.QuantizedMatmul(x, w, sc, b, true, q.GroupSize, q.Bits), dt)
}

// Linears returns the quantized matmuls of the quantized slots, for a
// forward pass of the frozen base without adapters.
func (q *Quantized) Linears(frozen []*mlx.Array) (model.Linears, error) {
	if err := q.check(frozen); err != nil {
		return nil, err
	}
	lin := model.Linears{}
	for k, i := range q.Indices {
		sc, b := q.extras(frozen, k)
		lin[i] = model.Linear{Arrays: []*mlx.Array{frozen[i], sc, b}, Apply: q.quantizedMatmul}
	}
	return lin, nil
}
