package bench

import (
	"syscall"
	"time"
)

// processCPUTime is the user and system CPU time this process has used so
// far, all threads together (MLX's CPU stream runs on threads of its own).
// It returns 0 where getrusage fails.
func processCPUTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
