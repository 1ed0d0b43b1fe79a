// Package hostheap tunes the C allocator that MLX's CPU backend takes its
// array buffers from.
//
// MLX's CPU backend allocates each operation's output with malloc and
// frees it when the last array using it goes. glibc serves a large
// allocation with fresh pages from mmap and unmaps them on free, so a
// step that forms the same large arrays at every update (a fine-tune's
// [positions, vocabulary] logits and their softmax: 75 MB for SmolLM2 at
// 384 positions) takes page faults and has the kernel zero every page
// again each time. KeepFreedMemory has glibc serve such allocations from
// its heap, which keeps what is freed for the next allocation: a
// SmolLM2-135M LoRA update on a 2-core CPU took 4–6% less time, the
// process's peak resident memory 1–2% higher and flat over the run
// (docs/performance/memory.md). MLX's own peak figure does not change.
//
// Elsewhere (macOS, a C library other than glibc, a build without cgo)
// it does nothing.
package hostheap

// KeepFreedMemory makes the process's C allocator serve every allocation
// from its heap rather than from its own mapping, and return freed heap
// memory to the system only once more than trimThreshold bytes are free at
// its top. It reports whether the allocator took the settings (glibc
// only). It is process-wide, and posttrainllm's command calls it at
// start; a Go program using the packages gets the same settings from the
// environment: GLIBC_TUNABLES=glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=1073741824.
func KeepFreedMemory() bool { return keepFreedMemory(trimThreshold) }

// trimThreshold is how much free memory the heap keeps at its top before
// it gives any back: more than one fine-tune step's largest arrays.
const trimThreshold = 1 << 30
