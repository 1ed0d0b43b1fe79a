package mlx

/*
#include "bridge.h"
*/
import "C"

// MemoryStats are MLX allocator figures in bytes: Active is held by live
// arrays, Peak the highest Active since the last ResetPeakMemory, Cache the
// freed buffers MLX keeps for reuse.
type MemoryStats struct {
	Active, Peak, Cache uint64
}

// Memory returns the allocator's current figures, read together on the MLX
// thread.
func Memory() MemoryStats {
	var a, p, c C.size_t
	call(func() C.int {
		if rc := C.ptlm_memory_active(&a); rc != C.PTLM_OK {
			return rc
		}
		C.ptlm_memory_peak(&p)
		return C.ptlm_memory_cache(&c)
	})
	return MemoryStats{Active: uint64(a), Peak: uint64(p), Cache: uint64(c)}
}

// ResetPeakMemory sets the peak figure to zero (not to the current active
// memory): it rises again with the next allocation.
func ResetPeakMemory() { _, _ = call(func() C.int { return C.ptlm_memory_reset_peak() }) }

// SetMemoryLimit sets MLX's memory guideline and returns the previous one.
// While the arrays alive and the buffers of queued work exceed it, MLX
// waits for queued work to finish (freeing what it held) before it queues
// more; it allocates beyond it when nothing is left to wait for.
func SetMemoryLimit(bytes uint64) uint64 {
	var prev C.size_t
	call(func() C.int { return C.ptlm_memory_set_limit(C.size_t(bytes), &prev) })
	return uint64(prev)
}

// MemoryLimit returns MLX's memory guideline (SetMemoryLimit).
func MemoryLimit() uint64 {
	var l C.size_t
	call(func() C.int { return C.ptlm_memory_limit(&l) })
	return uint64(l)
}

// SetCacheLimit bounds the buffer cache (0 disables it) and returns the
// previous limit.
func SetCacheLimit(bytes uint64) uint64 {
	var prev C.size_t
	call(func() C.int { return C.ptlm_memory_set_cache_limit(C.size_t(bytes), &prev) })
	return uint64(prev)
}

// ClearCache returns cached buffers to the system.
func ClearCache() { _, _ = call(func() C.int { return C.ptlm_memory_clear_cache() }) }
