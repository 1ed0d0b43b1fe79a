package mlx

/*
#include "bridge.h"
*/
import "C"

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
)

// mlxThread is the one OS thread that runs MLX work: a goroutine locked to
// its thread for the life of the process, started on first use. MLX 0.32
// keeps streams, the compile cache, command encoders and the random key per
// OS thread, so running every call on one thread is what makes arrays,
// compiled functions and keys valid wherever they are used next.
var mlxThread struct {
	once sync.Once
	jobs chan func()
	wake chan struct{} // a handle was queued for release (see releaseLater)

	mu      sync.Mutex
	pending []func() // releases queued by cleanups, run on the thread

	handoffs atomic.Uint64 // single bridge calls handed over (see Handoffs)
}

func startMLXThread() {
	mlxThread.jobs = make(chan func())
	mlxThread.wake = make(chan struct{}, 1)
	ready := make(chan struct{})
	go func() {
		runtime.LockOSThread() // never unlocked: the thread stays MLX's
		if C.ptlm_claim_thread() != 0 {
			panic("mlx: another OS thread already claimed the MLX bridge")
		}
		raiseThreadQoS()
		close(ready)
		serve()
	}()
	<-ready
}

// serve runs jobs and queued releases on the MLX thread, forever.
func serve() {
	for {
		select {
		case job := <-mlxThread.jobs:
			job()
		case <-mlxThread.wake:
		}
		releasePending()
	}
}

// onMLXThread reports whether the caller runs on the MLX thread. Only the
// goroutine that owns the thread can: it is locked to it.
func onMLXThread() bool { return C.ptlm_on_mlx_thread() != 0 }

// Do runs fn on the MLX thread and returns its error. Called on the MLX
// thread (from inside another Do, a traced function or a training step) it
// runs fn directly. Calls from different goroutines run one after another.
//
// Every function of this package hands itself to the MLX thread when called
// from elsewhere, one call at a time; Do hands a whole computation over at
// once, which is what entry points that run many operations (a training
// step, a checkpoint load, sampling) use. A panic in fn is recovered on the
// MLX thread and raised again in the caller; runtime.Goexit in fn (as
// t.Fatal calls) ends the caller's goroutine instead, and the MLX thread
// lives on. A Scope fn leaves open is dropped when fn returns, its arrays
// left to the garbage collector, so that it cannot capture the arrays of
// the next goroutine's work.
//
// fn must not wait for another goroutine that itself does MLX work: that
// goroutine's calls queue behind fn, which never returns.
func Do(fn func() error) error {
	if onMLXThread() {
		return fn()
	}
	mlxThread.once.Do(startMLXThread)
	type result struct {
		err      error
		panicked bool
		goexit   bool
		value    any
		stack    []byte
	}
	done := make(chan result, 1)
	mlxThread.jobs <- func() {
		returned := false
		defer func() {
			dropScopes()
			if returned {
				return
			}
			if r := recover(); r != nil {
				done <- result{panicked: true, value: r, stack: debug.Stack()}
				return
			}
			// fn called runtime.Goexit. Letting this goroutine exit would end
			// the locked thread and MLX's per-thread state with it, so it
			// keeps serving from here; the caller exits in its place.
			done <- result{goexit: true}
			serve()
		}()
		err := fn()
		returned = true
		done <- result{err: err}
	}
	r := <-done
	switch {
	case r.panicked:
		panic(fmt.Sprintf("%v\n\n[recovered on the MLX thread]\n%s", r.value, r.stack))
	case r.goexit:
		runtime.Goexit()
	}
	return r.err
}

// Await receives from ch (a value, or the zero value once ch is closed).
// Called on the MLX thread (inside Do, as the training loop is), it serves
// the other goroutines' MLX work while it waits, so that a computation
// holding the thread can wait for a goroutine that itself uses MLX: the
// training loop waiting for rollouts from a generation engine, whose loop
// runs its steps with Do. Each job served runs with its own scopes; the
// caller's open scopes are set aside meanwhile and restored. Off the MLX
// thread it is a plain receive.
func Await[T any](ch <-chan T) T {
	if !onMLXThread() {
		return <-ch
	}
	for {
		select {
		case v := <-ch:
			return v
		case job := <-mlxThread.jobs:
			outer := topScope
			topScope = nil
			job()
			topScope = outer
		case <-mlxThread.wake:
		}
		releasePending()
	}
}

// Handoffs returns how many single calls this package has handed to the MLX
// thread because they came from another goroutine. Each costs two OS thread
// wake-ups (see BenchmarkDoHandoff); a count that grows with every step
// means a loop that belongs inside Do.
func Handoffs() uint64 { return mlxThread.handoffs.Load() }

// call makes one bridge call, f, on the MLX thread. f returns the status of
// its first bridge call, or of the first that failed: when the first says
// the caller is off the MLX thread it has done nothing, so call runs f again
// there. onThread reports whether the caller is on the MLX thread (f ran
// directly), which decides whether new arrays join the open Scope. The error
// carries the bridge's message, read on the thread that failed: the last
// error is per thread.
func call(f func() C.int) (onThread bool, err error) {
	return finish(f(), f)
}

// finish completes a bridge call whose first attempt returned rc; redo
// makes the call again. Hot paths call the bridge themselves and build redo
// only when rc is not 0, which saves allocating a closure per call.
func finish(rc C.int, redo func() C.int) (onThread bool, err error) {
	switch rc {
	case C.PTLM_OK:
		return true, nil
	case C.PTLM_OFF_THREAD:
		mlxThread.handoffs.Add(1)
		return false, Do(func() error {
			if redo() != C.PTLM_OK {
				return bridgeError(lastError())
			}
			return nil
		})
	}
	return true, bridgeError(lastError())
}

// releaseLater queues a release for the MLX thread. Cleanups attached to
// arrays, closures and transforms run on the runtime's cleanup goroutine,
// never on the MLX thread, so they queue their release instead of calling
// into MLX there.
func releaseLater(release func()) {
	mlxThread.mu.Lock()
	mlxThread.pending = append(mlxThread.pending, release)
	mlxThread.mu.Unlock()
	mlxThread.once.Do(startMLXThread)
	select {
	case mlxThread.wake <- struct{}{}:
	default: // a wake-up is already queued
	}
}

// releasePending runs the queued releases; it runs on the MLX thread, between
// jobs and at each Eval.
func releasePending() {
	mlxThread.mu.Lock()
	pending := mlxThread.pending
	mlxThread.pending = nil
	mlxThread.mu.Unlock()
	for _, release := range pending {
		release()
	}
}
