package mlx

/*
#include <stdlib.h>
#include "bridge.h"
*/
import "C"

import (
	"fmt"
	"runtime"
	"unsafe"
)

// CUDAAvailable reports whether the loaded libmlx has MLX's CUDA backend
// (the mlx-cuda wheel's library). Custom CUDA kernels run only there; the
// mlx-cpu and mlx-metal libraries return false.
func CUDAAvailable() bool {
	var ok C.bool
	if _, err := call(func() C.int { return C.ptlm_cuda_available(&ok) }); err != nil {
		return false
	}
	return bool(ok)
}

// CUDAKernel is a kernel written in CUDA C++ that MLX compiles at run time
// (NVRTC) on first use and launches as one graph operation, so it traces
// into compiled functions like any other operation. MLX writes the
// kernel's signature: each input is a const pointer of its dtype's CUDA
// type, each output a pointer of the dtype asked for, and integer template
// arguments are compile-time constants of the source. Inputs are made
// row-contiguous before the launch. MLX caches the compiled kernel by name
// and template arguments, so a name must always come with the same source.
type CUDAKernel struct {
	owned[C.ptlm_kernel]
}

// KernelArg is an integer template argument of a CUDAKernel launch. MLX
// spells the values in the kernel's name, so they must not be negative.
type KernelArg struct {
	Name  string
	Value int
}

// KernelLaunch is how one CUDAKernel application runs: its outputs' shapes
// and dtypes, and its grid and thread-block sizes in threads (MLX divides
// the grid by the block, as for Metal kernels).
type KernelLaunch struct {
	OutputShapes [][]int
	OutputDtypes []Dtype
	Grid, Block  [3]int
	Template     []KernelArg
}

// NewCUDAKernel defines a kernel named name whose body is source (the
// statements of the function: MLX generates the signature from inputs and
// outputs, the parameter names in order) and whose header is code placed
// before the function (helpers, includes). It needs the CUDA library
// (CUDAAvailable): elsewhere MLX refuses the definition.
func NewCUDAKernel(name string, inputs, outputs []string, source, header string) (*CUDAKernel, error) {
	if len(inputs) == 0 || len(outputs) == 0 {
		return nil, fmt.Errorf("mlx: cuda kernel %q: %d inputs and %d outputs, want at least one of each", name, len(inputs), len(outputs))
	}
	cName, cSource, cHeader := C.CString(name), C.CString(source), C.CString(header)
	defer C.free(unsafe.Pointer(cName))
	defer C.free(unsafe.Pointer(cSource))
	defer C.free(unsafe.Pointer(cHeader))
	cIn, freeIn := cStrings(inputs)
	defer freeIn()
	cOut, freeOut := cStrings(outputs)
	defer freeOut()
	var h C.ptlm_kernel
	if _, err := call(func() C.int {
		return C.ptlm_cuda_kernel_new(cName, &cIn[0], C.size_t(len(inputs)), &cOut[0], C.size_t(len(outputs)), cSource, cHeader, &h)
	}); err != nil {
		return nil, check("cuda_kernel "+name, err)
	}
	k := &CUDAKernel{}
	own(k, &k.owned, h, freeKernel)
	return k, nil
}

func freeKernel(h C.ptlm_kernel) { call(func() C.int { return C.ptlm_kernel_free(h) }) }

// Free releases the kernel's definition (not MLX's cache of its compiled
// code). A nil kernel is a no-op.
func (k *CUDAKernel) Free() {
	if k != nil {
		k.release()
	}
}

// Apply returns the kernel's outputs for inputs as launched by l: lazy
// arrays like any operation's, computed when evaluated on a CUDA device.
func (k *CUDAKernel) Apply(inputs []*Array, l KernelLaunch) ([]*Array, error) {
	n := len(l.OutputShapes)
	if n == 0 || len(l.OutputDtypes) != n {
		return nil, fmt.Errorf("mlx: cuda kernel: %d output shapes and %d dtypes, want the same number, at least one", n, len(l.OutputDtypes))
	}
	if len(inputs) == 0 {
		return nil, fmt.Errorf("mlx: cuda kernel: no inputs")
	}
	hs, err := handles(inputs)
	if err != nil {
		return nil, err
	}
	var shapes, ndims, dtypes []int
	for i, s := range l.OutputShapes {
		shapes = append(shapes, s...)
		ndims = append(ndims, len(s))
		dtypes = append(dtypes, int(l.OutputDtypes[i]))
	}
	cShapes, cNdims, cDtypes := cInts(shapes), cInts(ndims), cInts(dtypes)
	cGrid, cBlock := cInts(l.Grid[:]), cInts(l.Block[:])
	names := make([]string, len(l.Template))
	values := make([]int, len(l.Template))
	for i, a := range l.Template {
		// MLX writes the values into the kernel's C++ name, where a minus
		// sign does not compile.
		if a.Value < 0 {
			return nil, fmt.Errorf("mlx: cuda kernel: template argument %s = %d, want >= 0 (pass a negative number as an offset or as bits)", a.Name, a.Value)
		}
		names[i], values[i] = a.Name, a.Value
	}
	cNames, freeNames := cStrings(names)
	defer freeNames()
	cValues := cInts(values)
	var out []C.ptlm_array
	onThread, err := call(func() C.int {
		var v C.ptlm_vec
		if rc := C.ptlm_kernel_apply(k.h, &hs[0], C.size_t(len(inputs)), &cShapes[0], &cNdims[0], &cDtypes[0], C.size_t(n),
			&cGrid[0], &cBlock[0], &cNames[0], &cValues[0], C.size_t(len(names)), &v); rc != C.PTLM_OK {
			return rc
		}
		return takeVec(v, &out)
	})
	runtime.KeepAlive(k)
	if err != nil {
		return nil, opError("cuda_kernel", err, inputs...)
	}
	return newArrays(out, onThread), nil
}

// cStrings returns C copies of ss with one extra NULL entry (so &out[0] is
// valid for an empty list) and the function that frees them.
func cStrings(ss []string) ([]*C.char, func()) {
	out := make([]*C.char, len(ss)+1)
	for i, s := range ss {
		out[i] = C.CString(s)
	}
	return out, func() {
		for _, p := range out {
			if p != nil {
				C.free(unsafe.Pointer(p))
			}
		}
	}
}
