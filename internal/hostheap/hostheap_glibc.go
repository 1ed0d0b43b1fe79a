//go:build linux && cgo

package hostheap

/*
#include <stdlib.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

// ptlm_heap_keep sets glibc's malloc to serve allocations from its heap
// (no mmap) and to trim the heap's top only past trim bytes; 1 if both
// settings took, 0 otherwise (or on another C library).
static int ptlm_heap_keep(int trim) {
#ifdef __GLIBC__
  return mallopt(M_MMAP_MAX, 0) == 1 && mallopt(M_TRIM_THRESHOLD, trim) == 1;
#else
  (void)trim;
  return 0;
#endif
}

// ptlm_heap_mapped returns the bytes glibc's malloc holds in mappings of
// their own (mallinfo2's hblkhd), or -1 where it cannot say.
static long long ptlm_heap_mapped(void) {
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 33))
  return (long long)mallinfo2().hblkhd;
#else
  return -1;
#endif
}
*/
import "C"

import (
	"runtime"
	"unsafe"
)

func keepFreedMemory(trim int) bool { return C.ptlm_heap_keep(C.int(trim)) == 1 }

// mappedGrowth returns how much the bytes malloc holds in mappings of
// their own grow while a block of n bytes is held (on one OS thread, so
// that one arena serves it), or -1 where the C library cannot say.
func mappedGrowth(n int) int64 {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	before := int64(C.ptlm_heap_mapped())
	if before < 0 {
		return -1
	}
	p := C.malloc(C.size_t(n))
	after := int64(C.ptlm_heap_mapped())
	C.free(unsafe.Pointer(p))
	return after - before
}
