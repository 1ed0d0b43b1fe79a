package peft

import (
	"fmt"
	"slices"

	"github.com/posttrainllm/posttrainllm/mlx"
	"github.com/posttrainllm/posttrainllm/model"
)

// Quantized is a frozen base whose transformer-block projections, token
// embedding and untied output head (model.ParamSpec.Quantizable) are held
// quantized (MLX's affine mode), as mlx-lm holds a quantized model: the
// frozen parameter list keeps the model's layout, each quantized slot
// holding the packed weights, followed by the scales and biases of every
// quantized slot in Indices order. The learned positions, norms and biases
// stay as they were. Adapters train over it through quantized matmuls
// (Adapter.Linears); the embedding is looked up by gathering and
// dequantizing only the rows asked for, and a tied head's logits are a
// quantized matmul, so the float table is never formed. Dequantize gives
// back a float list in the model's layout, for fusing and evaluation.
type Quantized struct {
	Bits, GroupSize int
	// Indices are the quantized slots (model Specs order).
	Indices []int
	// Base is the model's parameter layout.
	Base []model.ParamSpec
}

// QuantizeBase quantizes every transformer-block projection weight, the
// token embedding and an untied output head of base (laid out as specs)
// whose input side (the embedding's width) is a multiple of groupSize,
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
		if s.Quantizable() && len(s.Shape) == 2 && s.Shape[1]%groupSize == 0 {
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
	return q.product(x, a, true)
}

// quantizedMatmulT is g·W (the gradient of x·Wᵀ with respect to x) over
// a quantized slot's arrays, in g's dtype.
func (q *Quantized) quantizedMatmulT(g *mlx.Array, a []*mlx.Array) *mlx.Array {
	return q.product(g, a, false)
}

// product is x·Wᵀ (transpose) or x·W over a quantized slot's arrays, in
// x's dtype, x cast to the scales' dtype for the quantized matmul.
func (q *Quantized) product(x *mlx.Array, a []*mlx.Array, transpose bool) *mlx.Array {
	dt := x.Dtype()
	if sd := a[1].Dtype(); sd != dt {
		x = mlx.AsType(x, sd)
	}
	// The quantized arrays are frozen: MLX has no gradient for them, and a
	// checkpointed block differentiates every input it is given.
	w, sc, b := mlx.StopGradient(a[0]), mlx.StopGradient(a[1]), mlx.StopGradient(a[2])
	return mlx.AsType(mlx.QuantizedMatmul(x, w, sc, b, transpose, q.GroupSize, q.Bits), dt)
}

// dequantizedMost is the size in bytes of the largest float weight a
// dequantized product forms (Adapter.DequantizedProducts). The block
// projections of the models people fine-tune are below it (Qwen2.5-0.5B's
// largest, 4,864 × 896, is 17 MB in float32); token tables are above it
// and keep MLX's quantized matmul, since their float copy (113 MB for
// SmolLM2-135M in float32) would sit at the loss, where a step peaks.
const dequantizedMost = 32 << 20

// floatProduct is product computed as a float matmul against the slot's
// weight dequantized in the scales' dtype.
func (q *Quantized) floatProduct(x *mlx.Array, a []*mlx.Array, transpose bool) *mlx.Array {
	dt := x.Dtype()
	if sd := a[1].Dtype(); sd != dt {
		x = mlx.AsType(x, sd)
	}
	w := q.dense(a)
	if transpose {
		w = mlx.Transpose(w)
	}
	return mlx.AsType(mlx.Matmul(x, w), dt)
}

// dequantizedProduct is floatProduct with a written gradient for x alone:
// the other orientation's floatProduct of the cotangent, against the
// weight dequantized again once the cotangent has arrived (mlx.Depends),
// so that no dequantized weight lives from the forward pass to the
// backward one and compiling cannot merge the two dequantizations into
// one that does. The quantized arrays are frozen: their cotangents are
// zeros that nothing reads.
func (q *Quantized) dequantizedProduct(x *mlx.Array, a []*mlx.Array, transpose bool) *mlx.Array {
	return frozenProduct("dequantized product", x, a, func(x *mlx.Array, a []*mlx.Array) *mlx.Array {
		return q.floatProduct(x, a, transpose)
	}, func(g *mlx.Array, a []*mlx.Array) *mlx.Array {
		return q.floatProduct(g, mlx.Depends(a, []*mlx.Array{g}), !transpose)
	})
}

// products returns x·Wᵀ and g·W for a quantized weight of rows × cols
// whose scales are of dtype: MLX's quantized matmuls, or where dequantized
// and the float weight is at most dequantizedMost bytes, float matmuls
// against the weight dequantized per product (dequantizedProduct).
func (q *Quantized) products(rows, cols int, dtype mlx.Dtype, dequantized bool) (apply, applyT func(*mlx.Array, []*mlx.Array) *mlx.Array) {
	if !dequantized || rows*cols*dtype.Size() > dequantizedMost {
		return q.quantizedMatmul, q.quantizedMatmulT
	}
	return func(x *mlx.Array, a []*mlx.Array) *mlx.Array { return q.dequantizedProduct(x, a, true) },
		func(g *mlx.Array, a []*mlx.Array) *mlx.Array { return q.dequantizedProduct(g, a, false) }
}

// dense returns a quantized weight whole, dequantized in the scales'
// dtype.
func (q *Quantized) dense(a []*mlx.Array) *mlx.Array {
	return mlx.Dequantize(mlx.StopGradient(a[0]), mlx.StopGradient(a[1]), mlx.StopGradient(a[2]), q.GroupSize, q.Bits)
}

// rows returns rows ids of a quantized table (the token embedding): the
// packed rows, scales and biases gathered, then dequantized, in the
// scales' dtype, so only the looked-up rows are ever float (mlx-lm's
// QuantizedEmbedding).
func (q *Quantized) rows(ids *mlx.Array, a []*mlx.Array) *mlx.Array {
	w := mlx.Take(mlx.StopGradient(a[0]), ids, 0)
	sc := mlx.Take(mlx.StopGradient(a[1]), ids, 0)
	b := mlx.Take(mlx.StopGradient(a[2]), ids, 0)
	return mlx.Dequantize(w, sc, b, q.GroupSize, q.Bits)
}

// Linears returns the quantized matmuls of the quantized slots, for a
// forward pass of the frozen base without adapters; the token embedding's
// also looks up rows (a tied head's logits are its matmul).
func (q *Quantized) Linears(frozen []*mlx.Array) (model.Linears, error) {
	return q.linears(frozen, false, false)
}

// linears is Linears, the products of weights of at most dequantizedMost
// bytes in float computed against their dequantized weight where
// dequantized (Quantized.products), and the output head's Linear with
// Dense where denseHead.
func (q *Quantized) linears(frozen []*mlx.Array, dequantized, denseHead bool) (model.Linears, error) {
	if err := q.check(frozen); err != nil {
		return nil, err
	}
	lin := model.Linears{}
	for k, i := range q.Indices {
		sc, b := q.extras(frozen, k)
		l := model.Linear{Arrays: []*mlx.Array{frozen[i], sc, b}}
		l.Apply, l.ApplyT = q.products(q.Base[i].Shape[0], q.Base[i].Shape[1], sc.Dtype(), dequantized)
		if q.Base[i].Kind == model.Embedding {
			l.Rows = q.rows
		}
		if denseHead && (q.Base[i].Kind == model.Head || q.Base[i].Kind == model.Embedding) {
			l.Dense = q.dense // a tied table's is used only as the head
		}
		lin[i] = l
	}
	return lin, nil
}
