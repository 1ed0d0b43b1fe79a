package train

import (
	"encoding/binary"
	"syscall"
)

// physicalMemory returns the machine's RAM in bytes, or 0 if unknown.
func physicalMemory() uint64 {
	s, err := syscall.Sysctl("hw.memsize")
	if err != nil || len(s) > 8 {
		return 0
	}
	// Sysctl drops trailing zero bytes of the little-endian uint64.
	var b [8]byte
	copy(b[:], s)
	return binary.LittleEndian.Uint64(b[:])
}
