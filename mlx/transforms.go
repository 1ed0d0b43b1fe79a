package mlx

/*
#include "bridge.h"
*/
import "C"

import (
	"fmt"
)

// CompileOption changes how Compile traces; see Shapeless.
type CompileOption uint8

// Shapeless makes Compile reuse one trace for inputs of any shape, so the
// traced function must not depend on the shapes (no reshape to a size
// computed from them).
const Shapeless CompileOption = 1

// Compile traces fn on its first call for each set of input shapes and
// dtypes (any shapes with Shapeless) and replays the fused, simplified graph
// on later calls; fn itself runs only when MLX traces. Every array fn reads
// must be an input: arrays captured by the Go closure become constants of
// the trace.
func Compile(fn Func, opts ...CompileOption) (*Closure, error) {
	shapeless := false
	for _, o := range opts {
		switch o {
		case Shapeless:
			shapeless = true
		default:
			return nil, fmt.Errorf("mlx: unknown compile option %d", o)
		}
	}
	c, err := NewClosure(fn)
	if err != nil {
		return nil, err
	}
	defer c.Free()
	var h C.ptlm_closure
	if _, err := call(func() C.int { return C.ptlm_compile(c.h, C.bool(shapeless), &h) }); err != nil {
		return nil, check("compile", err)
	}
	return wrapClosure(h), nil
}

// SetCompileEnabled turns MLX's compilation on or off process-wide. A
// closure compiled while it is off runs its function directly on every
// call, even after compilation is turned back on; closures compiled while
// it was on keep replaying their traces.
func SetCompileEnabled(enabled bool) error {
	_, err := call(func() C.int { return C.ptlm_set_compile_enabled(C.bool(enabled)) })
	return check("set_compile_enabled", err)
}

// ValueAndGradFunc computes a function's outputs and the gradients of its
// first output (a scalar) with respect to the chosen inputs.
type ValueAndGradFunc struct {
	owned[C.ptlm_vag]
	argnums []int
}

// ValueAndGrad returns the value-and-gradient transform of fn with respect
// to the inputs at argnums. fn's first output must be a scalar loss; further
// outputs are returned as auxiliary values.
func ValueAndGrad(fn Func, argnums ...int) (*ValueAndGradFunc, error) {
	if len(argnums) == 0 {
		return nil, fmt.Errorf("mlx: value_and_grad needs at least one argnum")
	}
	c, err := NewClosure(fn)
	if err != nil {
		return nil, err
	}
	defer c.Free()
	an := cInts(argnums)
	var h C.ptlm_vag
	if _, err := call(func() C.int { return C.ptlm_value_and_grad(c.h, &an[0], C.size_t(len(argnums)), &h) }); err != nil {
		return nil, check("value_and_grad", err)
	}
	v := &ValueAndGradFunc{argnums: append([]int(nil), argnums...)}
	own(v, &v.owned, h, freeVAG)
	return v, nil
}

// Call returns fn's outputs and one gradient per argnum, in argnum order.
func (v *ValueAndGradFunc) Call(inputs ...*Array) (values, grads []*Array, err error) {
	if v == nil || v.h == nil {
		return nil, nil, fmt.Errorf("mlx: call of a freed value_and_grad function")
	}
	for _, i := range v.argnums {
		if i < 0 || i >= len(inputs) {
			return nil, nil, fmt.Errorf("mlx: value_and_grad argnum %d out of range for %d inputs", i, len(inputs))
		}
	}
	hs, err := handles(inputs)
	if err != nil {
		return nil, nil, err
	}
	var vhs, ghs []C.ptlm_array
	onThread, err := call(func() C.int {
		var vals, gs C.ptlm_vec
		if rc := C.ptlm_vag_apply(v.h, &hs[0], C.size_t(len(inputs)), &vals, &gs); rc != C.PTLM_OK {
			return rc
		}
		rc := takeVec(vals, &vhs)
		if rc2 := takeVec(gs, &ghs); rc == C.PTLM_OK {
			rc = rc2
		}
		return rc
	})
	if err != nil {
		return nil, nil, check("value_and_grad", err)
	}
	return newArrays(vhs, onThread), newArrays(ghs, onThread), nil
}

// Free releases the transform.
func (v *ValueAndGradFunc) Free() {
	if v != nil {
		v.release()
	}
}

func freeVAG(h C.ptlm_vag) { call(func() C.int { return C.ptlm_vag_free(h) }) }
