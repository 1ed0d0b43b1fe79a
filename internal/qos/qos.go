// Package qos sets the quality-of-service class of OS threads, which is how
// macOS chooses between performance and efficiency cores on Apple silicon:
// the thread that drives MLX runs at user-initiated QoS (the user waits for
// its results), and host-side work beside training — writing files, drawing
// the loss plot, logging — at utility QoS, where it leaves the performance
// cores to the thread that feeds the GPU.
//
// On Linux it does nothing. The kernel places threads by load, not by a
// class, and the nearest lever, a thread's nice value, cannot be lowered
// again by an unprivileged process: a thread that Go's scheduler later hands
// to other goroutines would keep it.
package qos

import "runtime"

// Class is a quality-of-service class.
type Class int

const (
	// UserInitiated is work the user waits for: the MLX thread.
	UserInitiated Class = iota
	// Utility is long-running work whose progress the user does not wait
	// on: checkpoint and plot files, logs.
	Utility
)

func (c Class) String() string {
	if c == UserInitiated {
		return "user-initiated"
	}
	return "utility"
}

// SetThread sets the class of the calling OS thread. The goroutine must be
// locked to its thread (runtime.LockOSThread) for as long as the class
// should hold; another goroutine may run on the thread after it unlocks.
func SetThread(c Class) error { return setThread(c) }

// Run calls fn on an OS thread at class c and returns when fn does: the
// calling goroutine is locked to its thread for the call, and the thread's
// class is put back afterwards.
func Run(c Class, fn func()) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	restore := enter(c)
	defer restore()
	fn()
}
