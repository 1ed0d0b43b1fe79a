package mlx

/*
#include <stdlib.h>
#include "bridge.h"
*/
import "C"

import "unsafe"

// handleOrNil returns a's handle, or NULL for a nil array (an absent
// optional operand).
func handleOrNil(a *Array) C.ptlm_array {
	if a == nil {
		return nil
	}
	return a.h
}

// optionalErr is firstErr for operands that may be absent (nil).
func optionalErr(arrs ...*Array) error {
	for _, a := range arrs {
		if a != nil {
			if err := firstErr(a); err != nil {
				return err
			}
		}
	}
	return nil
}

// RMSNorm normalises the last axis of x by its root mean square and scales by
// weight (nil for none), with MLX's fused kernel.
func RMSNorm(x, weight *Array, eps float32) *Array {
	if err := firstErr(x); err != nil {
		return errArray(err)
	}
	if err := optionalErr(x, weight); err != nil {
		return errArray(err)
	}
	var h C.ptlm_array
	onThread, err := call(func() C.int { return C.ptlm_fast_rms_norm(x.h, handleOrNil(weight), C.float(eps), &h) })
	if err != nil {
		return errArray(opError("rms_norm", err, x))
	}
	return newArray(h, onThread)
}

// LayerNorm normalises the last axis of x to zero mean and unit variance,
// then applies weight and bias (either may be nil), with MLX's fused kernel.
func LayerNorm(x, weight, bias *Array, eps float32) *Array {
	if err := firstErr(x); err != nil {
		return errArray(err)
	}
	if err := optionalErr(x, weight, bias); err != nil {
		return errArray(err)
	}
	var h C.ptlm_array
	onThread, err := call(func() C.int {
		return C.ptlm_fast_layer_norm(x.h, handleOrNil(weight), handleOrNil(bias), C.float(eps), &h)
	})
	if err != nil {
		return errArray(opError("layer_norm", err, x))
	}
	return newArray(h, onThread)
}

// RoPE applies rotary position embeddings to the first dims features of the
// last axis of x ([..., T, D]), positions starting at offset.
func RoPE(x *Array, dims int, traditional bool, base, scale float32, offset int) *Array {
	return unary("rope", x, func(a C.ptlm_array, o *C.ptlm_array) C.int {
		return C.ptlm_fast_rope(a, C.int(dims), C.bool(traditional), C.float(base), C.float(scale), C.int(offset), o)
	})
}

// RoPEFreqs is RoPE with each rotated pair's frequency given rather than
// derived from a base: freqs [dims/2] holds the period of pair i (pair i
// turns by position·scale/freqs[i] radians), as MLX's fast::rope takes it.
// Scaled schemes such as Llama 3's, which stretch some frequencies and
// keep others, are written this way.
func RoPEFreqs(x *Array, dims int, traditional bool, freqs *Array, scale float32, offset int) *Array {
	return binary("rope", x, freqs, func(a, f C.ptlm_array, o *C.ptlm_array) C.int {
		return C.ptlm_fast_rope_freqs(a, C.int(dims), C.bool(traditional), C.float(scale), C.int(offset), f, o)
	})
}

// RoPERows is RoPE with each row of x ([B, ...]) starting at its own
// position, offsets [B] (int32): batched generation, whose rows hold
// sequences of different lengths, rotates each new token by its own
// position. freqs, when not nil, gives each rotated pair's period as for
// RoPEFreqs, and base is then unused.
func RoPERows(x *Array, dims int, traditional bool, base, scale float32, offsets, freqs *Array) *Array {
	if err := firstErr(x, offsets); err != nil {
		return errArray(err)
	}
	if err := optionalErr(freqs); err != nil {
		return errArray(err)
	}
	var h C.ptlm_array
	onThread, err := call(func() C.int {
		return C.ptlm_fast_rope_offsets(x.h, C.int(dims), C.bool(traditional), C.float(base), C.float(scale), offsets.h, handleOrNil(freqs), &h)
	})
	if err != nil {
		return errArray(opError("rope", err, x, offsets))
	}
	return newArray(h, onThread)
}

// AttentionMask selects the mask of ScaledDotProductAttention.
type AttentionMask string

// The masks MLX's fused attention supports without a mask array.
const (
	NoMask     AttentionMask = ""
	CausalMask AttentionMask = "causal"
)

// ScaledDotProductAttention computes softmax(q·kᵀ·scale + mask)·v over
// [B, H, T, D] inputs with MLX's fused kernel. mask is NoMask or CausalMask;
// maskArr is an additive or boolean mask array (nil for none).
func ScaledDotProductAttention(q, k, v *Array, scale float32, mask AttentionMask, maskArr *Array) *Array {
	if err := firstErr(q, k, v); err != nil {
		return errArray(err)
	}
	if err := optionalErr(maskArr); err != nil {
		return errArray(err)
	}
	cmode := C.CString(string(mask))
	defer C.free(unsafe.Pointer(cmode))
	var h C.ptlm_array
	onThread, err := call(func() C.int {
		return C.ptlm_fast_sdpa(q.h, k.h, v.h, C.float(scale), cmode, handleOrNil(maskArr), &h)
	})
	if err != nil {
		return errArray(opError("scaled_dot_product_attention", err, q, k, v))
	}
	return newArray(h, onThread)
}

// CrossEntropy returns the per-position cross-entropy of logits [..., V]
// against integer targets [...], with MLX's fused kernel.
func CrossEntropy(logits, targets *Array) *Array {
	return binary("cross_entropy", logits, targets, func(l, t C.ptlm_array, o *C.ptlm_array) C.int {
		return C.ptlm_fast_cross_entropy(l, t, o)
	})
}
