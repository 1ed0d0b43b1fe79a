package model

import (
	"fmt"

	"github.com/posttrainllm/posttrainllm/mlx"
)

// projections apply the model's weights, stored [out, in] as checkpoints
// store them (PyTorch's nn.Linear layout), to rows x [R, in]: x·Wᵀ, and
// c + x·Wᵀ with c a residual [R, out] or a bias [out] added in the GEMM's
// epilogue (mlx.AddMM).
//
// MLX differentiates x·Wᵀ through the transpose: its matmul VJP forms the
// gradient of Wᵀ, xᵀ·dY [in, out], and the transpose's VJP hands back a
// transposed view of it. Whatever reads a weight's gradient as rows (the
// flat layout's reshape into its group, optim.Flat) copies that view
// first: on a GPU a strided copy per weight and microbatch. With written
// VJPs (newProjections(true)) the weight's gradient is formed as dYᵀ·x,
// [out, in] and row-major like the weight: the GEMM reads dY transposed
// instead, which costs it nothing, and the reshape copies nothing. The
// input's gradient is dY·W either way.
type projections struct {
	mm    *mlx.Closure // (x, w) -> x·Wᵀ; nil: MLX's VJP
	addMM *mlx.Closure // (c, x, w) -> c + x·Wᵀ; nil: MLX's VJP
	// lin replaces x·Wᵀ by a Linear for the weights it holds (by the
	// array the block holds; see formulation.withLinears).
	lin map[*mlx.Array]Linear
}

// newProjections returns the projections with written VJPs when written
// is set, MLX's otherwise. Free releases them.
func newProjections(written bool) (projections, error) {
	if !written {
		return projections{}, nil
	}
	mm, err := mlx.CustomVJP(func(in []*mlx.Array) ([]*mlx.Array, error) {
		return []*mlx.Array{mlx.Matmul(in[0], mlx.Transpose(in[1]))}, nil
	}, func(primals, cotangents, _ []*mlx.Array) ([]*mlx.Array, error) {
		dx, dw := projectionGrads(primals[0], primals[1], cotangents[0])
		return []*mlx.Array{dx, dw}, nil
	})
	if err != nil {
		return projections{}, fmt.Errorf("model: projection: %w", err)
	}
	addMM, err := mlx.CustomVJP(func(in []*mlx.Array) ([]*mlx.Array, error) {
		return []*mlx.Array{mlx.AddMM(in[0], in[1], mlx.Transpose(in[2]), 1, 1)}, nil
	}, func(primals, cotangents, _ []*mlx.Array) ([]*mlx.Array, error) {
		c, dy := primals[0], cotangents[0]
		dc := dy
		if c.Ndim() == 1 { // a bias, broadcast over the rows
			dc = mlx.Sum(dy, 0)
		}
		dx, dw := projectionGrads(primals[1], primals[2], dy)
		return []*mlx.Array{dc, dx, dw}, nil
	})
	if err != nil {
		mm.Free()
		return projections{}, fmt.Errorf("model: projection: %w", err)
	}
	return projections{mm: mm, addMM: addMM}, nil
}

// projectionGrads are the gradients of x·Wᵀ with respect to x and W for
// the output's cotangent dy: dy·W, and dyᵀ·x laid out like W.
func projectionGrads(x, w, dy *mlx.Array) (dx, dw *mlx.Array) {
	return mlx.Matmul(dy, w), mlx.Matmul(mlx.Transpose(dy), x)
}

// Free releases the closures. A backward pass traced from the forward pass
// that used them still holds them; MLX releases them with that graph.
func (p projections) Free() {
	p.mm.Free()
	p.addMM.Free()
}

// written reports whether rows x go through the written VJPs: rows of a
// matrix, where the projections are defined.
func (p projections) written(x *mlx.Array) bool { return p.mm != nil && x.Ndim() == 2 }

// linear returns x·Wᵀ + b for a weight w [out, in] and a bias b [out]
// (nil for none), the bias added in the GEMM's epilogue.
func (p projections) linear(x, w, b *mlx.Array) *mlx.Array {
	if l, ok := p.lin[w]; ok {
		return addBias(l.apply(x), b)
	}
	if b != nil {
		return p.addLinear(b, x, w)
	}
	if !p.written(x) {
		return mlx.Matmul(x, mlx.Transpose(w))
	}
	return first(p.mm.Call(x, w))
}

// addLinear returns c + x·Wᵀ for a weight w [out, in], with c rows
// [R, out] (a residual) or a bias [out], as one matrix multiply-add.
func (p projections) addLinear(c, x, w *mlx.Array) *mlx.Array {
	if l, ok := p.lin[w]; ok {
		return mlx.Add(c, l.apply(x))
	}
	if !p.written(x) || (c.Ndim() != 1 && c.Ndim() != 2) {
		return mlx.AddMM(c, x, mlx.Transpose(w), 1, 1)
	}
	return first(p.addMM.Call(c, x, w))
}

// first returns a closure call's single output, or an array carrying its
// error.
func first(out []*mlx.Array, err error) *mlx.Array {
	if err != nil {
		return mlx.ErrorArray(fmt.Errorf("model: projection: %w", err))
	}
	return out[0]
}
