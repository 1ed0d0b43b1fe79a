package mlx

/*
#include "bridge.h"
*/
import "C"

// Reshape returns a with a new shape of the same size; one dimension may be -1.
func Reshape(a *Array, shape ...int) *Array {
	sh := cInts(shape)
	return unary("reshape", a, func(x C.ptlm_array, o *C.ptlm_array) C.int {
		return C.ptlm_reshape(x, &sh[0], C.int(len(shape)), o)
	})
}

// Transpose permutes a's axes (reverses them when none are given).
func Transpose(a *Array, axes ...int) *Array {
	ax := cInts(axes)
	return unary("transpose", a, func(x C.ptlm_array, o *C.ptlm_array) C.int {
		return C.ptlm_transpose(x, &ax[0], C.int(len(axes)), o)
	})
}

// SwapAxes exchanges two axes.
func SwapAxes(a *Array, axis1, axis2 int) *Array {
	return unary("swapaxes", a, func(x C.ptlm_array, o *C.ptlm_array) C.int {
		return C.ptlm_swapaxes(x, C.int(axis1), C.int(axis2), o)
	})
}

// BroadcastTo broadcasts a to shape.
func BroadcastTo(a *Array, shape ...int) *Array {
	sh := cInts(shape)
	return unary("broadcast_to", a, func(x C.ptlm_array, o *C.ptlm_array) C.int {
		return C.ptlm_broadcast_to(x, &sh[0], C.int(len(shape)), o)
	})
}

// ExpandDims inserts a size-1 axis at axis.
func ExpandDims(a *Array, axis int) *Array {
	return unary("expand_dims", a, func(x C.ptlm_array, o *C.ptlm_array) C.int { return C.ptlm_expand_dims(x, C.int(axis), o) })
}

// Squeeze removes the size-1 axis at axis.
func Squeeze(a *Array, axis int) *Array {
	return unary("squeeze", a, func(x C.ptlm_array, o *C.ptlm_array) C.int { return C.ptlm_squeeze(x, C.int(axis), o) })
}

// Flatten merges axes start..end (inclusive; negative counts from the end).
func Flatten(a *Array, start, end int) *Array {
	return unary("flatten", a, func(x C.ptlm_array, o *C.ptlm_array) C.int {
		return C.ptlm_flatten(x, C.int(start), C.int(end), o)
	})
}

// Concatenate joins arrays along axis.
func Concatenate(arrs []*Array, axis int) *Array {
	return nary("concatenate", arrs, func(h *C.ptlm_array, n C.size_t, o *C.ptlm_array) C.int {
		return C.ptlm_concatenate(h, n, C.int(axis), o)
	})
}

// Stack joins arrays of one shape along a new axis.
func Stack(arrs []*Array, axis int) *Array {
	return nary("stack", arrs, func(h *C.ptlm_array, n C.size_t, o *C.ptlm_array) C.int {
		return C.ptlm_stack(h, n, C.int(axis), o)
	})
}

// Split cuts a into num equal parts along axis.
func Split(a *Array, num, axis int) []*Array {
	if err := firstErr(a); err != nil {
		return errArrays(num, err)
	}
	var hs []C.ptlm_array
	onThread, err := call(func() C.int {
		var v C.ptlm_vec
		if rc := C.ptlm_split_sections(a.h, C.int(num), C.int(axis), &v); rc != C.PTLM_OK {
			return rc
		}
		return takeVec(v, &hs)
	})
	if err != nil {
		return errArrays(num, opError("split", err, a))
	}
	return newArrays(hs, onThread)
}

// SplitAt cuts a along axis before each of the given indices.
func SplitAt(a *Array, indices []int, axis int) []*Array {
	if err := firstErr(a); err != nil {
		return errArrays(len(indices)+1, err)
	}
	ix := cInts(indices)
	var hs []C.ptlm_array
	onThread, err := call(func() C.int {
		var v C.ptlm_vec
		if rc := C.ptlm_split_indices(a.h, &ix[0], C.int(len(indices)), C.int(axis), &v); rc != C.PTLM_OK {
			return rc
		}
		return takeVec(v, &hs)
	})
	if err != nil {
		return errArrays(len(indices)+1, opError("split", err, a))
	}
	return newArrays(hs, onThread)
}

// Slice returns a[start:stop] with stride 1 in every axis; start and stop
// have one entry per axis.
func Slice(a *Array, start, stop []int) *Array {
	strides := make([]int, len(start))
	for i := range strides {
		strides[i] = 1
	}
	return SliceStrided(a, start, stop, strides)
}

// SliceStrided returns a[start:stop:strides].
func SliceStrided(a *Array, start, stop, strides []int) *Array {
	if len(stop) != len(start) || len(strides) != len(start) {
		return errArray(&Error{Op: "slice", Operands: a.describe(), Msg: "start, stop and strides need one entry per axis"})
	}
	s, e, st := cInts(start), cInts(stop), cInts(strides)
	return unary("slice", a, func(x C.ptlm_array, o *C.ptlm_array) C.int {
		return C.ptlm_slice(x, &s[0], &e[0], &st[0], C.int(len(start)), o)
	})
}

// SliceUpdate returns src with src[start:stop] replaced by update.
func SliceUpdate(src, update *Array, start, stop []int) *Array {
	if len(stop) != len(start) {
		return errArray(&Error{Op: "slice_update", Operands: src.describe(), Msg: "start and stop need one entry per axis"})
	}
	strides := make([]int, len(start))
	for i := range strides {
		strides[i] = 1
	}
	s, e, st := cInts(start), cInts(stop), cInts(strides)
	return binary("slice_update", src, update, func(x, u C.ptlm_array, o *C.ptlm_array) C.int {
		return C.ptlm_slice_update(x, u, &s[0], &e[0], &st[0], C.int(len(start)), o)
	})
}

// Take gathers slices of a at indices along axis.
func Take(a, indices *Array, axis int) *Array {
	return binary("take", a, indices, func(x, i C.ptlm_array, o *C.ptlm_array) C.int {
		return C.ptlm_take(x, i, C.int(axis), o)
	})
}

// TakeAlongAxis gathers a's elements at indices along axis (indices
// broadcast against a).
func TakeAlongAxis(a, indices *Array, axis int) *Array {
	return binary("take_along_axis", a, indices, func(x, i C.ptlm_array, o *C.ptlm_array) C.int {
		return C.ptlm_take_along_axis(x, i, C.int(axis), o)
	})
}

// PutAlongAxis returns a with values written at indices along axis.
func PutAlongAxis(a, indices, values *Array, axis int) *Array {
	if err := firstErr(a, indices, values); err != nil {
		return errArray(err)
	}
	var h C.ptlm_array
	onThread, err := call(func() C.int { return C.ptlm_put_along_axis(a.h, indices.h, values.h, C.int(axis), &h) })
	if err != nil {
		return errArray(opError("put_along_axis", err, a, indices, values))
	}
	return newArray(h, onThread)
}
