package mlx

/*
#include <stdlib.h>
#include "bridge.h"
*/
import "C"

import (
	"fmt"
	"math"
	"runtime"
	"strings"
	"sync/atomic"
	"unsafe"
)

// maxDims bounds the rank the bridge reports; MLX arrays in a GPT never
// come close.
const maxDims = 16

// Array is one MLX array. It is immutable: operations return new arrays.
// An Array whose operation failed carries the error (see Err). Any goroutine
// may use it, and several may read it at once; freeing it while another
// goroutine uses it is a race, as for any Go value.
type Array struct {
	h        C.ptlm_array
	err      error
	scope    *Scope // scope that frees it, if any (touched on the MLX thread only)
	borrowed bool   // handle owned by C++ (closure inputs); never freed here
	cleanup  runtime.Cleanup
	meta     atomic.Pointer[arrayMeta] // dtype and shape, cached on first query
}

// arrayMeta is an array's dtype and shape. It is cached atomically, so
// goroutines that share an array may query it at once.
type arrayMeta struct {
	dtype Dtype
	shape []int
	dims  [4]int // backs shape for arrays of up to 4 dimensions
}

// newArray wraps a fresh handle owned by Go. onThread is what call reported
// for the call that made it: only arrays made on the MLX thread directly
// join its open scope.
func newArray(h C.ptlm_array, onThread bool) *Array {
	a := &Array{h: h}
	a.cleanup = runtime.AddCleanup(a, func(h C.ptlm_array) { releaseLater(func() { freeHandle(h) }) }, h)
	registerInScope(a, onThread)
	return a
}

// newArrays wraps handles that one call made (see newArray).
func newArrays(hs []C.ptlm_array, onThread bool) []*Array {
	out := make([]*Array, len(hs))
	for i, h := range hs {
		out[i] = newArray(h, onThread)
	}
	return out
}

// freeHandle releases an array handle on the MLX thread. It calls the
// bridge itself first, without call's closure: it runs for every array.
func freeHandle(h C.ptlm_array) {
	if rc := C.ptlm_array_free(h); rc != C.PTLM_OK {
		finish(rc, func() C.int { return C.ptlm_array_free(h) })
	}
}

// errArray returns an array that carries err.
func errArray(err error) *Array { return &Array{err: err} }

// Err returns the error this array carries, or nil.
func (a *Array) Err() error {
	if a == nil {
		return firstErr(a)
	}
	return firstErr(a)
}

// Valid reports whether the array holds a live handle and no error.
func (a *Array) Valid() bool { return a.Err() == nil }

// Free releases the MLX handle now. Freeing twice, or freeing an array that
// carries an error, is a no-op.
func (a *Array) Free() {
	if a == nil || a.h == nil {
		return
	}
	if !a.borrowed {
		a.cleanup.Stop()
		freeHandle(a.h)
	}
	a.h = nil
	a.err = errFreed
}

// Free releases each array (nil entries are skipped).
func Free(arrs ...*Array) {
	for _, a := range arrs {
		a.Free()
	}
}

// info returns a's dtype and shape, asking MLX on first use; nil for an
// array carrying an error.
func (a *Array) info() *arrayMeta {
	if m := a.meta.Load(); m != nil {
		return m
	}
	if a.Err() != nil {
		return nil
	}
	var dt, nd C.int
	var sh [maxDims]C.int
	if _, err := call(func() C.int { return C.ptlm_array_info(a.h, &dt, &nd, &sh[0], maxDims) }); err != nil {
		return nil
	}
	m := &arrayMeta{dtype: Dtype(dt)}
	if int(nd) <= len(m.dims) {
		m.shape = m.dims[:nd:nd]
	} else {
		m.shape = make([]int, int(nd))
	}
	for i := range m.shape {
		m.shape[i] = int(sh[i])
	}
	a.meta.Store(m)
	return m
}

// Shape returns the array's dimensions (nil for an array carrying an error).
// The slice is shared: do not modify it.
func (a *Array) Shape() []int {
	if m := a.info(); m != nil {
		return m.shape
	}
	return nil
}

// Dim returns dimension i; negative i counts from the end.
func (a *Array) Dim(i int) int {
	s := a.Shape()
	if i < 0 {
		i += len(s)
	}
	return s[i]
}

// Ndim returns the number of dimensions.
func (a *Array) Ndim() int { return len(a.Shape()) }

// Size returns the number of elements.
func (a *Array) Size() int {
	n := 1
	for _, d := range a.Shape() {
		n *= d
	}
	return n
}

// Dtype returns the element type (-1 for an array carrying an error).
func (a *Array) Dtype() Dtype {
	if m := a.info(); m != nil {
		return m.dtype
	}
	return -1
}

// Nbytes returns the size of the array's data in bytes.
func (a *Array) Nbytes() int { return a.Size() * a.Dtype().Size() }

// describe formats dtype and shape for error messages, e.g. "float32[2,3]".
func (a *Array) describe() string {
	if a == nil {
		return "nil"
	}
	if a.Err() != nil {
		return "invalid"
	}
	return a.Dtype().String() + shapeString(a.Shape())
}

// String describes the array without reading its data.
func (a *Array) String() string { return "mlx.Array(" + a.describe() + ")" }

func shapeString(s []int) string {
	parts := make([]string, len(s))
	for i, d := range s {
		parts[i] = fmt.Sprint(d)
	}
	return "[" + strings.Join(parts, ",") + "]"
}

// cInts converts Go ints to a C int slice; it returns a one-element slice for
// empty input so &s[0] is always valid.
func cInts(v []int) []C.int {
	out := make([]C.int, len(v)+1)
	for i, x := range v {
		out[i] = C.int(x)
	}
	return out[:len(v)+1]
}

// Number is the set of Go element types arrays are built from and read into.
type Number interface {
	~bool | ~uint8 | ~uint16 | ~uint32 | ~uint64 | ~int8 | ~int16 | ~int32 | ~int64 |
		~float32 | ~float64
}

func dtypeFor[T Number]() Dtype {
	var z T
	switch any(z).(type) {
	case bool:
		return Bool
	case uint8:
		return Uint8
	case uint16:
		return Uint16
	case uint32:
		return Uint32
	case uint64:
		return Uint64
	case int8:
		return Int8
	case int16:
		return Int16
	case int32:
		return Int32
	case int64:
		return Int64
	case float32:
		return Float32
	case float64:
		return Float64
	}
	panic("unreachable: Number covers every case")
}

// FromSlice builds an array of the given shape from data, with the dtype that
// matches T (float64 data gives a float32 array: MLX's GPU backends have no
// float64). With no shape, the array is 1-D of len(data).
func FromSlice[T Number](data []T, shape ...int) *Array {
	if len(shape) == 0 {
		shape = []int{len(data)}
	}
	n := 1
	for _, d := range shape {
		if d < 0 {
			return errArray(&Error{Op: "from_slice", Msg: fmt.Sprintf("negative dimension in shape %v", shape)})
		}
		n *= d
	}
	if n != len(data) {
		return errArray(&Error{Op: "from_slice",
			Msg: fmt.Sprintf("shape %v needs %d elements, got %d", shape, n, len(data))})
	}
	if f64, ok := any(data).([]float64); ok {
		f32 := make([]float32, len(f64))
		for i, v := range f64 {
			f32[i] = float32(v)
		}
		return FromSlice(f32, shape...)
	}
	return fromBytes(unsafe.Pointer(unsafe.SliceData(data)), dtypeFor[T](), shape)
}

// FromBytes builds an array from raw little-endian element bytes, e.g. the
// bits of bfloat16 values.
func FromBytes(data []byte, dtype Dtype, shape ...int) *Array {
	n := 1
	for _, d := range shape {
		n *= d
	}
	if n*dtype.Size() != len(data) || dtype.Size() == 0 {
		return errArray(&Error{Op: "from_bytes",
			Msg: fmt.Sprintf("%s%s needs %d bytes, got %d", dtype, shapeString(shape), n*dtype.Size(), len(data))})
	}
	return fromBytes(unsafe.Pointer(unsafe.SliceData(data)), dtype, shape)
}

func fromBytes(p unsafe.Pointer, dtype Dtype, shape []int) *Array {
	sh := cInts(shape)
	var h C.ptlm_array
	if p == nil {
		var zero [8]byte
		p = unsafe.Pointer(&zero[0])
	}
	onThread, err := call(func() C.int { return C.ptlm_array_from_data(p, C.int(dtype), &sh[0], C.int(len(shape)), &h) })
	if err != nil {
		return errArray(&Error{Op: "from_data", Operands: dtype.String() + shapeString(shape), Msg: err.Error()})
	}
	return newArray(h, onThread)
}

// Scalar returns a 0-D array holding v converted to dtype.
func Scalar(v float64, dtype Dtype) *Array {
	var h C.ptlm_array
	asFloat := dtype.IsFloat() || math.IsNaN(v) || math.IsInf(v, 0)
	// Called directly first, like unary: AddScalar and MulScalar make one
	// scalar per op.
	if rc := scalar(v, dtype, asFloat, &h); rc != C.PTLM_OK {
		onThread, err := finish(rc, func() C.int { return scalar(v, dtype, asFloat, &h) })
		if err != nil {
			return errArray(&Error{Op: "scalar", Operands: dtype.String(), Msg: err.Error()})
		}
		return newArray(h, onThread)
	}
	return newArray(h, true)
}

func scalar(v float64, dtype Dtype, asFloat bool, h *C.ptlm_array) C.int {
	if asFloat {
		return C.ptlm_array_from_float(C.double(v), C.int(dtype), h)
	}
	return C.ptlm_array_from_int(C.int64_t(v), C.int(dtype), h)
}

// Bytes evaluates the array and returns a copy of its row-major data.
func (a *Array) Bytes() ([]byte, error) {
	if err := a.Err(); err != nil {
		return nil, err
	}
	buf := make([]byte, a.Nbytes())
	p := unsafe.Pointer(unsafe.SliceData(buf))
	if p == nil {
		var zero [8]byte
		p = unsafe.Pointer(&zero[0])
	}
	hostWaits.Add(1)
	if _, err := call(func() C.int { return C.ptlm_array_read(a.h, p, C.size_t(len(buf))) }); err != nil {
		return nil, opError("read", err, a)
	}
	return buf, nil
}

// ToSlice evaluates a and returns its elements converted to T (the dtype
// conversion happens in MLX, with MLX's rounding and saturation rules).
func ToSlice[T Number](a *Array) ([]T, error) {
	if err := a.Err(); err != nil {
		return nil, err
	}
	want := dtypeFor[T]()
	src := a
	if a.Dtype() != want {
		src = AsType(a, want)
		defer src.Free()
		if err := src.Err(); err != nil {
			return nil, err
		}
	}
	out := make([]T, a.Size())
	p := unsafe.Pointer(unsafe.SliceData(out))
	if p == nil {
		var zero [8]byte
		p = unsafe.Pointer(&zero[0])
	}
	hostWaits.Add(1)
	if _, err := call(func() C.int { return C.ptlm_array_read(src.h, p, C.size_t(len(out)*want.Size())) }); err != nil {
		return nil, opError("read", err, a)
	}
	return out, nil
}

// RowContiguous evaluates a and reports whether its data lies in row-major
// order without gaps. A view such as a transpose shares its input's buffer
// in another order; an operation that needs rows (a reshape to a flat
// vector, a concatenation) then copies it first, a kernel of its own on a
// GPU.
func (a *Array) RowContiguous() (bool, error) {
	if err := a.Err(); err != nil {
		return false, err
	}
	var out C.bool
	hostWaits.Add(1)
	if _, err := call(func() C.int { return C.ptlm_array_row_contiguous(a.h, &out) }); err != nil {
		return false, opError("row_contiguous", err, a)
	}
	return bool(out), nil
}

// Float32s evaluates a and returns its elements as float32.
func (a *Array) Float32s() ([]float32, error) { return ToSlice[float32](a) }

// Int32s evaluates a and returns its elements as int32.
func (a *Array) Int32s() ([]int32, error) { return ToSlice[int32](a) }

// Item evaluates a one-element array and returns its value as float64.
func (a *Array) Item() (float64, error) {
	if err := a.Err(); err != nil {
		return 0, err
	}
	if a.Size() != 1 {
		return 0, &Error{Op: "item", Operands: a.describe(), Msg: "array must have exactly one element"}
	}
	v, err := ToSlice[float32](a)
	if err != nil {
		return 0, err
	}
	return float64(v[0]), nil
}

// ErrorArray returns an array that carries err, for code that builds arrays
// and finds a problem of its own (a wrong parameter count, say): the error
// then surfaces wherever array errors do.
func ErrorArray(err error) *Array { return errArray(err) }
