package mlx

/*
#include <stdlib.h>
#include "bridge.h"
*/
import "C"

import (
	"fmt"
	"unsafe"
)

// Group is a group of processes (ranks) that communicate through MLX's
// distributed layer: the ring backend (TCP; MLX_RANK and MLX_HOSTFILE),
// NCCL on CUDA (MLX_RANK, MLX_WORLD_SIZE, NCCL_HOST_IP, NCCL_PORT; one GPU
// per process), MPI or JACCL. A group of size 1 communicates with nobody:
// its collectives return their input.
//
// A group lives as long as the process: MLX keeps its backend's
// connections open and has no way to close them, so Group has no Free.
type Group struct {
	h          C.ptlm_group
	rank, size int
	backend    string
}

// DistributedAvailable reports whether MLX was built with the backend
// ("ring", "nccl", "mpi", "jaccl", or "any" for at least one of them).
// It says nothing about whether the environment configures it.
func DistributedAvailable(backend string) bool {
	cs := C.CString(backend)
	defer C.free(unsafe.Pointer(cs))
	var ok C.bool
	if _, err := call(func() C.int { return C.ptlm_distributed_available(cs, &ok) }); err != nil {
		return false
	}
	return bool(ok)
}

// InitDistributed connects this process to its peers through backend
// ("any" tries every available one) and returns the group of all of them.
// The backend reads its configuration from the environment (see Group).
// With strict, a backend that is unavailable or fails to connect is an
// error; without, the result is then a size-1 group. MLX caches the group:
// a second call with the same backend returns the same connections.
//
// Connecting blocks until every rank has started: the ring backend retries
// for a while and then fails, NCCL may wait indefinitely. A caller that
// must not hang runs ranks under a supervisor (posttrainllm train --nproc).
func InitDistributed(strict bool, backend string) (*Group, error) {
	cs := C.CString(backend)
	defer C.free(unsafe.Pointer(cs))
	g := &Group{backend: backend}
	var rank, size C.int
	_, err := call(func() C.int {
		if rc := C.ptlm_distributed_init(C.bool(strict), cs, &g.h); rc != C.PTLM_OK {
			return rc
		}
		if rc := C.ptlm_group_rank(g.h, &rank); rc != C.PTLM_OK {
			return rc
		}
		return C.ptlm_group_size(g.h, &size)
	})
	if err != nil {
		return nil, fmt.Errorf("mlx: distributed init (backend %q, strict %v): %w", backend, strict, err)
	}
	g.rank, g.size = int(rank), int(size)
	return g, nil
}

// Rank is this process's index in the group, 0 … Size()-1. A nil group is
// rank 0 of 1.
func (g *Group) Rank() int {
	if g == nil {
		return 0
	}
	return g.rank
}

// Size is the number of processes in the group; 1 for a nil group.
func (g *Group) Size() int {
	if g == nil {
		return 1
	}
	return g.size
}

// Backend is the backend name the group was initialised with.
func (g *Group) Backend() string {
	if g == nil {
		return ""
	}
	return g.backend
}

// String describes the group as "rank R of N (backend)".
func (g *Group) String() string {
	return fmt.Sprintf("rank %d of %d (%s)", g.Rank(), g.Size(), g.Backend())
}

// collective runs a collective bridge op over group g. A nil or size-1
// group returns a itself: there is nobody to talk to, and the traced graph
// stays what it is without a group.
func collective(op string, a *Array, g *Group, f func(C.ptlm_array, C.ptlm_group, *C.ptlm_array) C.int) *Array {
	if g.Size() == 1 {
		return a
	}
	return unary(op, a, func(x C.ptlm_array, o *C.ptlm_array) C.int { return f(x, g.h, o) })
}

// AllSum returns the element-wise sum of a over every rank of g, on every
// rank; a must have the same shape and dtype everywhere. It is an ordinary
// op: inside a compiled function it becomes part of the trace. A nil or
// size-1 group returns a.
func AllSum(a *Array, g *Group) *Array {
	return collective("all_sum", a, g, func(x C.ptlm_array, h C.ptlm_group, o *C.ptlm_array) C.int {
		return C.ptlm_all_sum(x, h, o)
	})
}

// AllMax returns the element-wise maximum of a over every rank of g (see
// AllSum).
func AllMax(a *Array, g *Group) *Array {
	return collective("all_max", a, g, func(x C.ptlm_array, h C.ptlm_group, o *C.ptlm_array) C.int {
		return C.ptlm_all_max(x, h, o)
	})
}

// AllGather concatenates a from every rank along axis 0, in rank order
// (see AllSum).
func AllGather(a *Array, g *Group) *Array {
	return collective("all_gather", a, g, func(x C.ptlm_array, h C.ptlm_group, o *C.ptlm_array) C.int {
		return C.ptlm_all_gather(x, h, o)
	})
}
