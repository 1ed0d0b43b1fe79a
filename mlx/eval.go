package mlx

/*
#include <stdlib.h>
#include "bridge.h"
*/
import "C"

import (
	"fmt"
	"strings"
	"sync/atomic"
	"unsafe"
)

// hostWaits counts the calls that made the host wait for arrays to be
// computed (HostWaits).
var hostWaits atomic.Uint64

// HostWaits returns how many calls of this package have waited for arrays
// to be computed: Eval, and the reads that evaluate first (Item, ToSlice,
// Bytes, RowContiguous, …). AsyncEval does not wait. On a GPU each wait
// leaves the device idle until the host records the next work, so a
// training loop waits as rarely as it can; the count across a loop shows
// how often (train's tests pin the trainer's).
func HostWaits() uint64 { return hostWaits.Load() }

// handles collects the C handles of arrs, or the first error they carry.
func handles(arrs []*Array) ([]C.ptlm_array, error) {
	if err := firstErr(arrs...); err != nil {
		return nil, err
	}
	hs := make([]C.ptlm_array, len(arrs)+1)
	for i, a := range arrs {
		hs[i] = a.h
	}
	return hs, nil
}

// Eval computes the arrays (and everything they depend on) now. It first
// runs the releases that cleanups queued (the MLX thread also runs them
// between handed-over calls).
func Eval(arrs ...*Array) error {
	if onMLXThread() {
		releasePending()
	}
	hs, err := handles(arrs)
	if err != nil {
		return err
	}
	hostWaits.Add(1)
	// Called directly first, like unary: a step evaluates every time.
	if rc := C.ptlm_eval(&hs[0], C.size_t(len(hs)-1)); rc != C.PTLM_OK {
		_, err := finish(rc, func() C.int { return C.ptlm_eval(&hs[0], C.size_t(len(hs)-1)) })
		return check("eval", err)
	}
	return nil
}

// GraphOps counts, by primitive name, the operations in the unevaluated
// graph behind arrs: what an Eval of them would run. Views (Reshape,
// Transpose, Slice, Broadcast, …) are counted too though they move no data;
// on a GPU nearly every other operation is one kernel launch, so for a
// compiled function it shows how far MLX fused the graph.
func GraphOps(arrs ...*Array) (map[string]int, error) {
	hs, err := handles(arrs)
	if err != nil {
		return nil, err
	}
	var out *C.char
	if _, err := call(func() C.int { return C.ptlm_graph_ops(&hs[0], C.size_t(len(arrs)), &out) }); err != nil {
		return nil, check("graph_ops", err)
	}
	defer C.free(unsafe.Pointer(out))
	counts := map[string]int{}
	for _, line := range strings.Split(strings.TrimSpace(C.GoString(out)), "\n") {
		i := strings.LastIndexByte(line, ' ') // names may hold spaces ("Scatter Sum")
		if i < 0 {
			continue
		}
		name, n := line[:i], line[i+1:]
		var c int
		if _, err := fmt.Sscan(n, &c); err != nil {
			return nil, fmt.Errorf("mlx: graph_ops: bad count in %q", line)
		}
		counts[name] = c
	}
	return counts, nil
}

// viewOps are the primitives that produce views or bookkeeping nodes and
// launch no kernel on a GPU.
var viewOps = map[string]bool{
	"Reshape": true, "Transpose": true, "Slice": true, "Broadcast": true, "BroadcastAxes": true,
	"Squeeze": true, "ExpandDims": true, "Split": true, "Flatten": true, "Unflatten": true,
	"AsStrided": true, "CustomTransforms": true, "StopGradient": true, "Depends": true,
}

// CountKernelOps sums a GraphOps count over the operations that are not
// views: about the kernels an evaluation launches on a GPU.
func CountKernelOps(ops map[string]int) int {
	n := 0
	for name, c := range ops {
		if !viewOps[name] {
			n += c
		}
	}
	return n
}

// AsyncEval schedules the arrays' computation and returns without waiting,
// so the host can prepare the next step while the device works.
func AsyncEval(arrs ...*Array) error {
	if onMLXThread() {
		releasePending()
	}
	hs, err := handles(arrs)
	if err != nil {
		return err
	}
	if rc := C.ptlm_async_eval(&hs[0], C.size_t(len(hs)-1)); rc != C.PTLM_OK {
		_, err := finish(rc, func() C.int { return C.ptlm_async_eval(&hs[0], C.size_t(len(hs)-1)) })
		return check("async_eval", err)
	}
	return nil
}
