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
	"runtime"
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
	h       C.ptlm_closure
	cleanup runtime.Cleanup
}

// NewClosure wraps fn for MLX's transforms.
func NewClosure(fn Func) (*Closure, error) {
	handle := cgo.NewHandle(fn)
	var h C.ptlm_closure
	if C.ptlm_closure_new_go(C.uintptr_t(handle), &h) != 0 {
		handle.Delete()
		return nil, &Error{Op: "closure", Msg: lastError()}
	}
	return wrapClosure(h), nil
}

func wrapClosure(h C.ptlm_closure) *Closure {
	c := &Closure{h: h}
	c.cleanup = runtime.AddCleanup(c, func(h C.ptlm_closure) { releaseLater(func() { C.ptlm_closure_free(h) }) }, h)
	return c
}

// Free releases the closure (and, for a compiled closure, its trace cache).
func (c *Closure) Free() {
	if c == nil || c.h == nil {
		return
	}
	c.cleanup.Stop()
	C.ptlm_closure_free(c.h)
	c.h = nil
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
	var out C.ptlm_vec
	if C.ptlm_closure_apply(c.h, &hs[0], C.size_t(len(inputs)), &out) != 0 {
		return nil, &Error{Op: "call", Msg: lastError()}
	}
	return takeVec(out), nil
}

// ptlmClosureCall is the C callback behind every Go closure.
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
	scope := NewScope()
	defer scope.Close()
	defer func() {
		if r := recover(); r != nil {
			C.ptlm_set_error(cstr(fmt.Sprintf("panic in traced Go function: %v\n%s", r, debug.Stack())))
			rc = 1
		}
	}()
	in := make([]*Array, len(hs))
	for i := range in {
		in[i] = &Array{h: hs[i], borrowed: true, dtype: -1}
	}
	defer Free(in...)
	out, err := fn(in)
	if err == nil {
		err = firstErr(out...)
	}
	if err != nil {
		C.ptlm_set_error(cstr(err.Error()))
		return 1
	}
	for _, a := range out {
		if C.ptlm_vec_push(outputs, a.h) != 0 {
			return 1
		}
	}
	return 0
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
	var h C.ptlm_closure
	if C.ptlm_custom_vjp_go(c.h, C.uintptr_t(cgo.NewHandle(vjp)), &h) != 0 {
		return nil, &Error{Op: "custom_vjp", Msg: lastError()} // the bridge released the handle
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
