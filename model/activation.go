package model

import (
	"fmt"
	"math"

	"github.com/posttrainllm/posttrainllm/mlx"
)

// The values of Config.GELU.
const (
	// GELUExact is x·Φ(x) with Φ(x) = ½(1 + erf(x/√2)), the standard normal
	// CDF: the TinyGPT family's activation since its first checkpoints.
	GELUExact = "exact"
	// GELUTanh is GPT-2's approximation, ½·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))).
	// It differs from the exact GELU by at most about 5e-4 and costs fewer
	// operations on the CPU, where erf is a polynomial of its own.
	GELUTanh = "tanh"
)

// geluTanhCubic is the cubic coefficient of GPT-2's tanh GELU.
const geluTanhCubic = 0.044715

// activation is the MLP's nonlinearity as the model calls it: either plain
// ops that MLX differentiates itself, or a custom-VJP closure whose
// derivative is written out (see newGELU). Free releases the closure.
type activation struct {
	plain   func(x *mlx.Array) *mlx.Array
	closure *mlx.Closure
}

// apply returns the activation of x.
func (a activation) apply(x *mlx.Array) *mlx.Array {
	if a.closure == nil {
		return a.plain(x)
	}
	out, err := a.closure.Call(x)
	if err != nil {
		return mlx.ErrorArray(fmt.Errorf("model: gelu: %w", err))
	}
	return out[0]
}

// Free releases the custom-VJP closure, if any.
func (a activation) Free() {
	if a.closure != nil {
		a.closure.Free()
	}
}

// newGELU returns the GELU named by kind (GELUExact or GELUTanh; "" is
// GELUExact), either as plain ops (writtenVJP false) or with its derivative
// written out as a custom VJP (writtenVJP true).
//
// Differentiating the ops keeps intermediate terms such as x/√2 and
// 1 + erf(·) alive for the backward pass, and on a GPU each becomes a
// kernel of its own (four forward kernels per layer and microbatch); with
// the written-out derivative the forward pass is one fused kernel and the
// backward pass recomputes what it needs from x. On the CPU the custom VJP
// costs more than it saves (docs/performance/cpu.md), so formulationFor
// chooses plain ops there.
//
// The written-out backward pass spells its shared terms differently from
// the forward pass (½ + ½·erf(x·(1/√2)) for ½·(1 + erf(x/√2))): MLX's
// compiler merges identical subexpressions, and a term shared by both
// passes would have to be materialised, costing the forward pass a second
// kernel again.
func newGELU(kind string, writtenVJP bool) (activation, error) {
	var fwd, bwd func(x *mlx.Array) *mlx.Array // bwd is dGELU/dx
	switch kind {
	case GELUExact, "":
		fwd = func(x *mlx.Array) *mlx.Array {
			return mlx.Multiply(x, mlx.MulScalar(mlx.AddScalar(mlx.Erf(mlx.DivScalar(x, math.Sqrt2)), 1), 0.5))
		}
		bwd = func(x *mlx.Array) *mlx.Array { // Φ(x) + x·φ(x)
			cdf := mlx.AddScalar(mlx.MulScalar(mlx.Erf(mlx.MulScalar(x, 1/math.Sqrt2)), 0.5), 0.5)
			pdf := mlx.MulScalar(mlx.Exp(mlx.MulScalar(mlx.Square(x), -0.5)), 1/math.Sqrt(2*math.Pi))
			return mlx.Add(cdf, mlx.Multiply(x, pdf))
		}
	case GELUTanh:
		k := math.Sqrt(2 / math.Pi)
		fwd = func(x *mlx.Array) *mlx.Array {
			u := mlx.MulScalar(mlx.Add(x, mlx.MulScalar(mlx.Multiply(mlx.Square(x), x), geluTanhCubic)), k)
			return mlx.Multiply(mlx.MulScalar(x, 0.5), mlx.AddScalar(mlx.Tanh(u), 1))
		}
		bwd = func(x *mlx.Array) *mlx.Array { // ½(1 + t) + ½·x·(1 − t²)·√(2/π)·(1 + 3·0.044715·x²)
			x2 := mlx.Square(x)
			t := mlx.Tanh(mlx.Multiply(x, mlx.AddScalar(mlx.MulScalar(x2, geluTanhCubic*k), k)))
			du := mlx.AddScalar(mlx.MulScalar(x2, 3*geluTanhCubic*k), k)
			sech2 := mlx.AddScalar(mlx.Negative(mlx.Square(t)), 1)
			return mlx.Add(mlx.AddScalar(mlx.MulScalar(t, 0.5), 0.5), mlx.Multiply(mlx.MulScalar(x, 0.5), mlx.Multiply(sech2, du)))
		}
	default:
		return activation{}, fmt.Errorf("model: gelu %q, want %q or %q", kind, GELUExact, GELUTanh)
	}
	if !writtenVJP {
		return activation{plain: fwd}, nil
	}
	c, err := mlx.CustomVJP(func(in []*mlx.Array) ([]*mlx.Array, error) {
		return []*mlx.Array{fwd(in[0])}, nil
	}, func(primals, cotangents, _ []*mlx.Array) ([]*mlx.Array, error) {
		return []*mlx.Array{mlx.Multiply(cotangents[0], bwd(primals[0]))}, nil
	})
	if err != nil {
		return activation{}, fmt.Errorf("model: gelu: %w", err)
	}
	return activation{closure: c}, nil
}
