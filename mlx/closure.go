package mlx

/*
#include "bridge.h"

extern int ptlmClosureCall(uintptr_t payload, ptlm_array* inputs, size_t n, ptlm_vec outputs);
extern void ptlmClosureFree(uintptr_t payload);
extern int ptlmVJPCall(uintptr_t payload, ptlm_array* in, size_t n_primals, size_t n_outputs, ptlm_vec outputs);

static int ptlm_closure_new_go(uintptr_t payload, ptlm_closure* out) {
	return ptlm_closure_new((ptlm_closure_fn)ptlmClosureCall, payload, ptlmClosureFree, out);
}

static int ptlm_custom_vjp_go(ptlm_closure fun, uintptr_t payload, ptlm_closure* out) {
	return ptlm_custom_vjp(fun, (ptlm_vjp_fn)ptlmVJPCall, payload, ptlmClosureFree, out);
}
*/
import "C"

import (
	"fmt"
	"runtime/cgo"
	"runtime/debug"
	"unsafe"
)

// Func is a function of arrays to arrays, the form MLX transforms take.
// Arrays a Func receives are only valid during the call. Arrays it creates
// and does not return are freed when it returns.
type Func func(inputs []*Array) ([]*Array, error)

// Closure is an MLX function object: a Go Func wrapped for MLX, or the
// result of Compile. Free it when done; a compiled Closure's trace cache
// lives until then.
type Closure struct {
	owned[C.ptlm_closure]
}

// NewClosure wraps fn for MLX's transforms.
func NewClosure(fn Func) (*Closure, error) {
	handle := cgo.NewHandle(fn)
	var h C.ptlm_closure
	if _, err := call(func() C.int { return C.ptlm_closure_new_go(C.uintptr_t(handle), &h) }); err != nil {
		handle.Delete()
		return nil, check("closure", err)
	}
	return wrapClosure(h), nil
}

func wrapClosure(h C.ptlm_closure) *Closure {
	c := &Closure{}
	own(c, &c.owned, h, freeClosure)
	return c
}

func freeClosure(h C.ptlm_closure) { call(func() C.int { return C.ptlm_closure_free(h) }) }

// Free releases the closure (and, for a compiled closure, its trace cache).
func (c *Closure) Free() {
	if c != nil {
		c.release()
	}
}

// Call applies the closure to inputs.
func (c *Closure) Call(inputs ...*Array) ([]*Array, error) {
	if c == nil || c.h == nil {
		return nil, fmt.Errorf("mlx: call of a freed closure")
	}
	hs, err := handles(inputs)
	if err != nil {
		return nil, err
	}
	var outs []C.ptlm_array
	onThread, err := call(func() C.int {
		var v C.ptlm_vec
		if rc := C.ptlm_closure_apply(c.h, &hs[0], C.size_t(len(inputs)), &v); rc != C.PTLM_OK {
			return rc
		}
		return takeVec(v, &outs)
	})
	if err != nil {
		return nil, check("call", err)
	}
	return newArrays(outs, onThread), nil
}

// ptlmClosureCall is the C callback behind every Go closure. Callbacks run
// inside the bridge call that invoked them, so on the MLX thread.
//
//export ptlmClosureCall
func ptlmClosureCall(payload C.uintptr_t, inputs *C.ptlm_array, n C.size_t, outputs C.ptlm_vec) C.int {
	return callGo(unsafe.Slice(inputs, int(n)), outputs, cgo.Handle(payload).Value().(Func))
}

// ptlmVJPCall is the C callback behind CustomVJP's vjp: in holds the
// primals, the output cotangents and the outputs, in that order.
//
//export ptlmVJPCall
func ptlmVJPCall(payload C.uintptr_t, in *C.ptlm_array, nPrimals, nOutputs C.size_t, outputs C.ptlm_vec) C.int {
	vjp := cgo.Handle(payload).Value().(VJPFunc)
	np, no := int(nPrimals), int(nOutputs)
	return callGo(unsafe.Slice(in, np+2*no), outputs, func(a []*Array) ([]*Array, error) {
		return vjp(a[:np:np], a[np:np+no:np+no], a[np+no:])
	})
}

// callGo runs fn on borrowed input handles inside a scope, hands its
// outputs to MLX, and turns Go errors and panics into a failure status: a Go
// panic must never unwind through C++.
func callGo(hs []C.ptlm_array, outputs C.ptlm_vec, fn Func) (rc C.int) {
	defer func() {
		if r := recover(); r != nil {
			C.ptlm_set_error(cstr(fmt.Sprintf("panic in traced Go function: %v\n%s", r, debug.Stack())))
			rc = C.PTLM_FAILED
		}
	}()
	scope := NewScope()
	defer scope.Close()
	in := make([]*Array, len(hs))
	for i := range in {
		in[i] = &Array{h: hs[i], borrowed: true}
	}
	defer Free(in...)
	out, err := fn(in)
	if err == nil {
		err = firstErr(out...)
	}
	if err != nil {
		C.ptlm_set_error(cstr(err.Error()))
		return C.PTLM_FAILED
	}
	for _, a := range out {
		if _, err := call(func() C.int { return C.ptlm_vec_push(outputs, a.h) }); err != nil {
			return C.PTLM_FAILED // the bridge's message is still this thread's last error
		}
	}
	return C.PTLM_OK
}

// VJPFunc computes the cotangents of a function's inputs (one per primal)
// from its inputs (primals), the cotangents of its outputs and its outputs.
type VJPFunc func(primals, cotangents, outputs []*Array) ([]*Array, error)

// CustomVJP returns fn with its gradient given by vjp instead of by
// differentiating fn's ops. Autodiff then keeps nothing of fn's
// intermediates alive: the backward pass recomputes what vjp needs from the
// primals and outputs. Under Compile this lets a chain of elementwise ops
// fuse into one forward kernel, where differentiating through it would
// materialise every intermediate the backward pass reads.
func CustomVJP(fn Func, vjp VJPFunc) (*Closure, error) {
	if fn == nil || vjp == nil {
		return nil, fmt.Errorf("mlx: custom_vjp needs a function and its vjp")
	}
	c, err := NewClosure(fn)
	if err != nil {
		return nil, err
	}
	defer c.Free()
	// The handle is made once: a call refused off the MLX thread leaves it
	// untouched for the retry, and from then on the bridge owns it (it has
	// released it if the call failed).
	handle := C.uintptr_t(cgo.NewHandle(vjp))
	var h C.ptlm_closure
	if _, err := call(func() C.int { return C.ptlm_custom_vjp_go(c.h, handle, &h) }); err != nil {
		return nil, check("custom_vjp", err)
	}
	return wrapClosure(h), nil
}

//export ptlmClosureFree
func ptlmClosureFree(payload C.uintptr_t) { cgo.Handle(payload).Delete() }

// cstr returns a C string valid until the next call on this thread; the
// bridge copies it into its thread-local error.
func cstr(s string) *C.char {
	b := append([]byte(s), 0)
	return (*C.char)(unsafe.Pointer(&b[0]))
}
