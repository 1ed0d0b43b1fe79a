//go:build unix

package data

import (
	"os"
	"syscall"
)

// mapFile maps the first size bytes of f read-only and returns them with
// the function that unmaps them.
func mapFile(f *os.File, size int) ([]byte, func() error, error) {
	b, err := syscall.Mmap(int(f.Fd()), 0, size, syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		return nil, nil, err
	}
	return b, func() error { return syscall.Munmap(b) }, nil
}
