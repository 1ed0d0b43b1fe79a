package mlx

import "syscall"

// osThreadID identifies the calling OS thread (scopes are per thread).
func osThreadID() int { return syscall.Gettid() }
