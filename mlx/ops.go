package mlx

/*
#include "bridge.h"
*/
import "C"

import "fmt"

// unary runs a one-input bridge call, propagating carried errors. Like
// binary, it makes the call itself and builds call's closure only when the
// call did not succeed on the spot: most ops pass an f that captures
// nothing, and then a call on the MLX thread allocates nothing extra.
func unary(op string, a *Array, f func(C.ptlm_array, *C.ptlm_array) C.int) *Array {
	if err := firstErr(a); err != nil {
		return errArray(err)
	}
	var h C.ptlm_array
	if rc := f(a.h, &h); rc != C.PTLM_OK {
		onThread, err := finish(rc, func() C.int { return f(a.h, &h) })
		if err != nil {
			return errArray(opError(op, err, a))
		}
		return newArray(h, onThread)
	}
	return newArray(h, true)
}

// binary runs a two-input bridge call, propagating carried errors.
func binary(op string, a, b *Array, f func(C.ptlm_array, C.ptlm_array, *C.ptlm_array) C.int) *Array {
	if err := firstErr(a, b); err != nil {
		return errArray(err)
	}
	var h C.ptlm_array
	if rc := f(a.h, b.h, &h); rc != C.PTLM_OK {
		onThread, err := finish(rc, func() C.int { return f(a.h, b.h, &h) })
		if err != nil {
			return errArray(opError(op, err, a, b))
		}
		return newArray(h, onThread)
	}
	return newArray(h, true)
}

type reduceFn func(C.ptlm_array, *C.int, C.int, C.bool, *C.ptlm_array) C.int

func reduce(op string, a *Array, axes []int, keep bool, f reduceFn) *Array {
	ax := cInts(axes)
	return unary(op, a, func(x C.ptlm_array, o *C.ptlm_array) C.int {
		return f(x, &ax[0], C.int(len(axes)), C.bool(keep), o)
	})
}

// nary runs a bridge call over a list of arrays.
func nary(op string, arrs []*Array, f func(*C.ptlm_array, C.size_t, *C.ptlm_array) C.int) *Array {
	hs, err := handles(arrs)
	if err != nil {
		return errArray(err)
	}
	var h C.ptlm_array
	onThread, err := call(func() C.int { return f(&hs[0], C.size_t(len(arrs)), &h) })
	if err != nil {
		return errArray(opError(op, err, arrs...))
	}
	return newArray(h, onThread)
}

// takeVec moves a bridge vector's handles into *out and frees the vector.
// It runs inside the call function that produced v, after that function's
// first bridge call succeeded, so on the MLX thread: the vector never
// leaves it.
func takeVec(v C.ptlm_vec, out *[]C.ptlm_array) C.int {
	var n C.size_t
	rc := C.ptlm_vec_size(v, &n)
	if rc == C.PTLM_OK {
		hs := make([]C.ptlm_array, n+1)
		if rc = C.ptlm_vec_move_all(v, &hs[0]); rc == C.PTLM_OK {
			*out = hs[:n]
		}
	}
	C.ptlm_vec_free(v)
	return rc
}

// errArrays returns n arrays (at least one) carrying err.
func errArrays(n int, err error) []*Array {
	out := make([]*Array, max(n, 1))
	for i := range out {
		out[i] = errArray(err)
	}
	return out
}

// AddScalar returns a + s, with s in a's dtype.
func AddScalar(a *Array, s float64) *Array { return withScalar(Add, a, s) }

// MulScalar returns a * s, with s in a's dtype.
func MulScalar(a *Array, s float64) *Array { return withScalar(Multiply, a, s) }

// DivScalar returns a / s, with s in a's dtype.
func DivScalar(a *Array, s float64) *Array { return withScalar(Divide, a, s) }

// withScalar applies op to a and the scalar s cast to a's dtype, so a
// bfloat16 array stays bfloat16.
func withScalar(op func(a, b *Array) *Array, a *Array, s float64) *Array {
	if err := firstErr(a); err != nil {
		return errArray(err)
	}
	b := Scalar(s, a.Dtype())
	defer b.Free()
	return op(a, b)
}

// Where returns x where cond is true and y elsewhere, with broadcasting.
func Where(cond, x, y *Array) *Array {
	if err := firstErr(cond, x, y); err != nil {
		return errArray(err)
	}
	var h C.ptlm_array
	onThread, err := call(func() C.int { return C.ptlm_where(cond.h, x.h, y.h, &h) })
	if err != nil {
		return errArray(opError("where", err, cond, x, y))
	}
	return newArray(h, onThread)
}

// AddMM returns beta·c + alpha·(a @ b). On a GPU it is one GEMM whose
// epilogue adds c, where Add(c, Matmul(a, b)) launches a second kernel.
func AddMM(c, a, b *Array, alpha, beta float32) *Array {
	if err := firstErr(c, a, b); err != nil {
		return errArray(err)
	}
	var h C.ptlm_array
	onThread, err := call(func() C.int { return C.ptlm_addmm(c.h, a.h, b.h, C.float(alpha), C.float(beta), &h) })
	if err != nil {
		return errArray(opError("addmm", err, c, a, b))
	}
	return newArray(h, onThread)
}

// Depends returns arrays equal to inputs that MLX computes only after
// every one of dependencies: an ordering edge that carries no data, and
// gradients pass through it to inputs unchanged. Use it to keep a graph from
// holding two phases' intermediates at once.
func Depends(inputs, dependencies []*Array) []*Array {
	in, err := handles(inputs)
	if err != nil {
		return errArrays(len(inputs), err)
	}
	deps, err := handles(dependencies)
	if err != nil {
		return errArrays(len(inputs), err)
	}
	var hs []C.ptlm_array
	onThread, err := call(func() C.int {
		var v C.ptlm_vec
		if rc := C.ptlm_depends(&in[0], C.size_t(len(inputs)), &deps[0], C.size_t(len(dependencies)), &v); rc != C.PTLM_OK {
			return rc
		}
		return takeVec(v, &hs)
	})
	if err != nil {
		return errArrays(len(inputs), opError("depends", err, inputs...))
	}
	return newArrays(hs, onThread)
}

// Matmul returns the matrix product a @ b (batched over leading dims).
func Matmul(a, b *Array) *Array {
	return binary("matmul", a, b, func(x, y C.ptlm_array, o *C.ptlm_array) C.int { return C.ptlm_matmul(x, y, o) })
}

// Argmax returns the indices of the maxima along axis.
func Argmax(a *Array, axis int, keepdims bool) *Array {
	return unary("argmax", a, func(x C.ptlm_array, o *C.ptlm_array) C.int {
		return C.ptlm_argmax(x, C.int(axis), C.bool(keepdims), o)
	})
}

// ArgmaxAll returns the index of the maximum of the flattened array.
func ArgmaxAll(a *Array) *Array {
	return unary("argmax", a, func(x C.ptlm_array, o *C.ptlm_array) C.int { return C.ptlm_argmax_all(x, false, o) })
}

// Softmax returns exp(a)/sum(exp(a)) over the axes (all axes when none are
// given), computed in a's dtype.
func Softmax(a *Array, axes ...int) *Array { return softmax(a, axes, false) }

// SoftmaxPrecise is Softmax computed in float32 for low-precision inputs.
func SoftmaxPrecise(a *Array, axes ...int) *Array { return softmax(a, axes, true) }

func softmax(a *Array, axes []int, precise bool) *Array {
	ax := cInts(axes)
	return unary("softmax", a, func(x C.ptlm_array, o *C.ptlm_array) C.int {
		return C.ptlm_softmax(x, &ax[0], C.int(len(axes)), C.bool(precise), o)
	})
}

// AsType converts a to dtype. When a already has that dtype MLX returns
// the same array, so the result is a new handle to it and adds no op to the
// graph (the step casts every gradient, and the loss its logits, to
// float32; with float32 models those casts used to add copies).
func AsType(a *Array, dtype Dtype) *Array {
	return unary("astype", a, func(x C.ptlm_array, o *C.ptlm_array) C.int { return C.ptlm_astype(x, C.int(dtype), o) })
}

// Arange returns [start, start+step, …) up to stop, exclusive.
func Arange(start, stop, step float64, dtype Dtype) *Array {
	var h C.ptlm_array
	onThread, err := call(func() C.int {
		return C.ptlm_arange(C.double(start), C.double(stop), C.double(step), C.int(dtype), &h)
	})
	if err != nil {
		return errArray(&Error{Op: "arange", Operands: fmt.Sprintf("%g, %g, %g, %s", start, stop, step, dtype), Msg: err.Error()})
	}
	return newArray(h, onThread)
}

func filled(op string, shape []int, dtype Dtype, f func(*C.int, C.int, C.int, *C.ptlm_array) C.int) *Array {
	sh := cInts(shape)
	var h C.ptlm_array
	onThread, err := call(func() C.int { return f(&sh[0], C.int(len(shape)), C.int(dtype), &h) })
	if err != nil {
		return errArray(&Error{Op: op, Operands: dtype.String() + shapeString(shape), Msg: err.Error()})
	}
	return newArray(h, onThread)
}

// Zeros returns an array of zeros.
func Zeros(shape []int, dtype Dtype) *Array {
	return filled("zeros", shape, dtype, func(s *C.int, n, d C.int, o *C.ptlm_array) C.int { return C.ptlm_zeros(s, n, d, o) })
}

// Ones returns an array of ones.
func Ones(shape []int, dtype Dtype) *Array {
	return filled("ones", shape, dtype, func(s *C.int, n, d C.int, o *C.ptlm_array) C.int { return C.ptlm_ones(s, n, d, o) })
}

// ZerosLike returns zeros with a's shape and dtype.
func ZerosLike(a *Array) *Array {
	if err := firstErr(a); err != nil {
		return errArray(err)
	}
	return Zeros(a.Shape(), a.Dtype())
}

// Full returns an array of the given shape filled with v.
func Full(shape []int, v float64, dtype Dtype) *Array {
	val := Scalar(v, dtype)
	defer val.Free()
	if err := firstErr(val); err != nil {
		return errArray(err)
	}
	return filled("full", shape, dtype, func(s *C.int, n, d C.int, o *C.ptlm_array) C.int {
		return C.ptlm_full(s, n, val.h, d, o)
	})
}

// Tril keeps the elements on and below the k-th diagonal, zeroing the rest.
func Tril(a *Array, k int) *Array {
	return unary("tril", a, func(x C.ptlm_array, o *C.ptlm_array) C.int { return C.ptlm_tril(x, C.int(k), o) })
}

// Triu keeps the elements on and above the k-th diagonal, zeroing the rest.
func Triu(a *Array, k int) *Array {
	return unary("triu", a, func(x C.ptlm_array, o *C.ptlm_array) C.int { return C.ptlm_triu(x, C.int(k), o) })
}

// TopK returns the k largest elements along axis (in no particular order).
func TopK(a *Array, k, axis int) *Array {
	return unary("topk", a, func(x C.ptlm_array, o *C.ptlm_array) C.int { return C.ptlm_topk(x, C.int(k), C.int(axis), o) })
}

// Sort returns a sorted ascending along axis.
func Sort(a *Array, axis int) *Array {
	return unary("sort", a, func(x C.ptlm_array, o *C.ptlm_array) C.int { return C.ptlm_sort(x, C.int(axis), o) })
}

// CumSum returns the running sums of a along axis: inclusive sums count
// each element itself, exclusive ones only those before it; reverse runs
// from the end of the axis.
func CumSum(a *Array, axis int, reverse, inclusive bool) *Array {
	return unary("cumsum", a, func(x C.ptlm_array, o *C.ptlm_array) C.int {
		return C.ptlm_cumsum(x, C.int(axis), C.bool(reverse), C.bool(inclusive), o)
	})
}
