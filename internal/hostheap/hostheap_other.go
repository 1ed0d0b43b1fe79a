//go:build !linux || !cgo

package hostheap

func keepFreedMemory(int) bool { return false }

func mappedGrowth(int) int64 { return -1 }
