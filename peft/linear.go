package peft

import (
	"github.com/posttrainllm/posttrainllm/mlx"
	"github.com/posttrainllm/posttrainllm/model"
)

// Linears returns the model.Linears that apply the adapters unmerged, the
// way training computes with them: for LoRA
//
//	y = x·W0ᵀ + s·(x·Aᵀ)·Bᵀ
//
// so no merged [out, in] weight is formed per microbatch, and for DoRA
// the same product scaled per output row by m/‖W0 + s·B·A‖ (the row norms
// need the merged matrix, which DoRA forms for them, in float32, as its
// merged form does; the product itself stays unmerged). x·W0ᵀ is a
// quantized matmul where the base is quantized (a.Quant), and the
// quantized slots without adapters get theirs too. base is the frozen
// list (Quantized's layout when a.Quant is set), adapter the adapter
// arrays in Specs order. It also returns the parameter list the model
// takes with the Linears: base's first len(a.Base) entries.
//
// Adapted projections that share their input are computed together
// (GroupedLinears) unless a.PerProjection asks for one Linear per
// projection (ProjectionLinears). Both compute the same function.
func (a *Adapter) Linears(base, adapter []*mlx.Array) (model.Linears, []*mlx.Array, error) {
	if a.PerProjection {
		return a.ProjectionLinears(base, adapter)
	}
	return a.GroupedLinears(base, adapter)
}

// GroupedLinears is Linears with one grouped model.Linear
// (model.Linear.Group) for each set of adapted projections that share
// their input (a block's wq, wk and wv; SwiGLU's w1 and w3), so that the
// model keeps its stacked formulation and the step has fewer operations.
// Sets with only some projections adapted keep a Linear per projection.
func (a *Adapter) GroupedLinears(base, adapter []*mlx.Array) (model.Linears, []*mlx.Array, error) {
	lin, params, err := a.ProjectionLinears(base, adapter)
	if err != nil {
		return nil, nil, err
	}
	a.regroup(lin, func(g group) model.Linear { return a.groupLinear(g, base, adapter) })
	return lin, params, nil
}

// ProjectionLinears is Linears with one model.Linear per adapted (or
// quantized) projection, for a caller that replaces or inspects
// projections one by one.
func (a *Adapter) ProjectionLinears(base, adapter []*mlx.Array) (model.Linears, []*mlx.Array, error) {
	if err := a.check(base, adapter); err != nil {
		return nil, nil, err
	}
	lin := model.Linears{}
	if a.Quant != nil {
		var err error
		if lin, err = a.Quant.linears(base, a.DequantizedProducts, a.DequantizedHead); err != nil {
			return nil, nil, err
		}
	}
	k := a.perTarget()
	scale := a.Config.Scale()
	dora := a.Config.Method == DoRA
	for j, i := range a.Targets {
		ad := adapter[j*k : (j+1)*k]
		baseLin, quantized := lin[i]
		if !quantized {
			baseLin = model.Linear{Arrays: []*mlx.Array{base[i]}, Apply: plainMatmul}
		}
		nb := len(baseLin.Arrays)
		arrays := append(append([]*mlx.Array{}, baseLin.Arrays...), ad...)
		apply0 := baseLin.Apply
		lin[i] = model.Linear{Arrays: arrays, Apply: func(x *mlx.Array, arr []*mlx.Array) *mlx.Array {
			b, ad := arr[:nb], arr[nb:]
			y := loraTerm(x, ad[0], ad[1], scale)
			if !dora {
				return mlx.Add(apply0(x, b), y)
			}
			var w0 *mlx.Array
			if quantized {
				w0 = a.Quant.dequantize(b)
			} else {
				w0 = b[0]
			}
			w := mlx.Add(mlx.AsType(w0, mlx.Float32), mlx.MulScalar(mlx.Matmul(ad[1], ad[0]), scale))
			g := mlx.AsType(mlx.Divide(ad[2], rowNorm(w)), x.Dtype())
			return mlx.Multiply(mlx.Add(apply0(x, b), y), g)
		}}
	}
	return lin, base[:len(a.Base)], nil
}

// plainMatmul is x·Wᵀ for a float weight, cast to x's dtype as the model
// casts its parameters.
func plainMatmul(x *mlx.Array, a []*mlx.Array) *mlx.Array {
	return mlx.Matmul(x, mlx.Transpose(mlx.AsType(a[0], x.Dtype())))
}

// plainMatmulT is g·W for a float weight (the gradient of plainMatmul
// with respect to x), in g's dtype.
func plainMatmulT(g *mlx.Array, a []*mlx.Array) *mlx.Array {
	return mlx.Matmul(g, mlx.AsType(a[0], g.Dtype()))
}

// loraTerm is s·(x·Aᵀ)·Bᵀ for rows x, computed in float32 (the adapters'
// dtype) and cast to x's dtype.
func loraTerm(x, A, B *mlx.Array, scale float64) *mlx.Array {
	h := mlx.Matmul(mlx.AsType(x, A.Dtype()), mlx.Transpose(A))
	return mlx.AsType(mlx.MulScalar(mlx.Matmul(h, mlx.Transpose(B)), scale), x.Dtype())
}

// dequantize is the float weight of one quantized slot's arrays
// [packed, scales, biases].
func (q *Quantized) dequantize(a []*mlx.Array) *mlx.Array {
	return mlx.Dequantize(a[0], a[1], a[2], q.GroupSize, q.Bits)
}
