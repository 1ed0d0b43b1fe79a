package pretrain

import "syscall"

// osThreadID identifies the calling OS thread.
func osThreadID() int { return syscall.Gettid() }
