package train

import "syscall"

// physicalMemory returns the machine's RAM in bytes, or 0 if unknown.
func physicalMemory() uint64 {
	var info syscall.Sysinfo_t
	if err := syscall.Sysinfo(&info); err != nil {
		return 0
	}
	return uint64(info.Totalram) * uint64(info.Unit)
}
