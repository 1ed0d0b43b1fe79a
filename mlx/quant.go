package mlx

/*
#include "bridge_quant.h"
*/
import "C"

import (
	"fmt"
	"slices"
)

// QuantBits lists the bit widths of MLX's affine quantization, and
// QuantGroupSizes its group sizes.
var (
	QuantBits       = []int{2, 3, 4, 5, 6, 8}
	QuantGroupSizes = []int{32, 64, 128}
)

// CheckQuantization reports bits or a group size that MLX's affine
// quantization does not take, naming the value and the ones it does.
func CheckQuantization(groupSize, bits int) error {
	if !slices.Contains(QuantBits, bits) {
		return fmt.Errorf("mlx: quantization bits %d, want one of %v", bits, QuantBits)
	}
	if !slices.Contains(QuantGroupSizes, groupSize) {
		return fmt.Errorf("mlx: quantization group size %d, want one of %v", groupSize, QuantGroupSizes)
	}
	return nil
}

// Quantize packs w [..., n] into bits-bit integers along its last axis, in
// groups of groupSize values that share a scale and a bias (MLX's affine
// mode: w ≈ scale·q + bias per group). It returns the packed uint32
// weights [..., n·bits/32] and the scales and biases [..., n/groupSize] in
// w's dtype. n must be a multiple of groupSize.
func Quantize(w *Array, groupSize, bits int) (packed, scales, biases *Array) {
	fail := func(err error) (*Array, *Array, *Array) {
		return errArray(err), errArray(err), errArray(err)
	}
	if err := firstErr(w); err != nil {
		return fail(err)
	}
	if err := CheckQuantization(groupSize, bits); err != nil {
		return fail(err)
	}
	var hs []C.ptlm_array
	onThread, err := call(func() C.int {
		var v C.ptlm_vec
		if rc := C.ptlm_quantize(w.h, C.int(groupSize), C.int(bits), &v); rc != C.PTLM_OK {
			return rc
		}
		return takeVec(v, &hs)
	})
	if err != nil {
		return fail(opError("quantize", err, w))
	}
	if len(hs) != 3 {
		for _, h := range hs {
			freeHandle(h)
		}
		return fail(fmt.Errorf("mlx: quantize returned %d arrays, want 3", len(hs)))
	}
	out := newArrays(hs, onThread)
	return out[0], out[1], out[2]
}

// Dequantize returns the matrix that Quantize packed into packed, scales
// and biases, in the scales' dtype.
func Dequantize(packed, scales, biases *Array, groupSize, bits int) *Array {
	if err := firstErr(packed, scales, biases); err != nil {
		return errArray(err)
	}
	if err := CheckQuantization(groupSize, bits); err != nil {
		return errArray(err)
	}
	var h C.ptlm_array
	onThread, err := call(func() C.int {
		return C.ptlm_dequantize(packed.h, scales.h, biases.h, C.int(groupSize), C.int(bits), &h)
	})
	if err != nil {
		return errArray(opError("dequantize", err, packed, scales, biases))
	}
	return newArray(h, onThread)
}

// QuantizedMatmul returns x·Wᵀ (transpose) or x·W, W being the matrix
// that Quantize packed into packed, scales and biases, without forming W.
// x must have the scales' dtype. It is differentiable with respect to x
// (not to the quantized weights, which fine-tuning freezes).
func QuantizedMatmul(x, packed, scales, biases *Array, transpose bool, groupSize, bits int) *Array {
	if err := firstErr(x, packed, scales, biases); err != nil {
		return errArray(err)
	}
	if err := CheckQuantization(groupSize, bits); err != nil {
		return errArray(err)
	}
	var h C.ptlm_array
	onThread, err := call(func() C.int {
		return C.ptlm_quantized_matmul(x.h, packed.h, scales.h, biases.h, C.bool(transpose), C.int(groupSize), C.int(bits), &h)
	})
	if err != nil {
		return errArray(opError("quantized_matmul", err, x, packed, scales, biases))
	}
	return newArray(h, onThread)
}

// Checkpoint returns fn as a closure whose intermediate arrays are not
// kept for the backward pass: a gradient through it runs fn again from its
// inputs (MLX's checkpoint), trading compute for the memory of fn's
// activations. It works inside Compile and ValueAndGrad; as with Compile,
// every array fn reads must be an input.
func Checkpoint(fn Func) (*Closure, error) {
	c, err := NewClosure(fn)
	if err != nil {
		return nil, err
	}
	defer c.Free()
	var h C.ptlm_closure
	if _, err := call(func() C.int { return C.ptlm_checkpoint(c.h, &h) }); err != nil {
		return nil, check("checkpoint", err)
	}
	return wrapClosure(h), nil
}
