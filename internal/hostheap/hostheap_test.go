package hostheap

import "testing"

// TestKeepFreedMemoryServesLargeBlocksFromTheHeap: a 40 MB block, beyond
// the largest size glibc's malloc keeps in its heap by default (32 MiB),
// gets a mapping of its own before KeepFreedMemory and none after.
func TestKeepFreedMemoryServesLargeBlocksFromTheHeap(t *testing.T) {
	const n = 40 << 20
	g := mappedGrowth(n)
	if g < 0 {
		t.Skip("the C library does not report its mappings (glibc 2.33+ does)")
	}
	if g < n {
		t.Fatalf("before KeepFreedMemory a %d-byte block grew malloc's mappings by %d bytes; want at least the block", n, g)
	}
	if !KeepFreedMemory() {
		t.Fatal("KeepFreedMemory = false on glibc")
	}
	if g := mappedGrowth(n); g != 0 {
		t.Errorf("after KeepFreedMemory a %d-byte block grew malloc's mappings by %d bytes; want 0", n, g)
	}
}
