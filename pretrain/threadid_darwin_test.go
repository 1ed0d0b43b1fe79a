package pretrain

import "syscall"

// osThreadID identifies the calling OS thread: macOS's thread_selfid, the
// system-wide id pthread_threadid_np reports (test files cannot use cgo).
func osThreadID() int {
	id, _, _ := syscall.RawSyscall(syscall.SYS_THREAD_SELFID, 0, 0, 0)
	return int(id)
}
