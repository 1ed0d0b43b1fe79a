//go:build !unix

package data

import (
	"io"
	"os"
)

// mapFile reads the first size bytes of f into memory on platforms without
// mmap; the returned release function does nothing.
func mapFile(f *os.File, size int) ([]byte, func() error, error) {
	b := make([]byte, size)
	if _, err := io.ReadFull(f, b); err != nil {
		return nil, nil, err
	}
	return b, func() error { return nil }, nil
}
