// Package mlx is posttrainllm's Go binding to Apple's MLX array framework.
//
// It wraps a thin C bridge (bridge.h) over MLX's C++ API: every MLX call is
// one short C function that returns a status and catches every C++
// exception, so an invalid operation surfaces in Go as an error naming the op
// and its operand shapes instead of aborting the process.
//
// # Arrays and errors
//
// An *Array owns one MLX array handle. Operations are plain functions
// (Add, Matmul, Softmax, …) that return a new *Array, so model code reads as
// the math. An operation that fails returns an array carrying the error; every
// later operation on it carries the same error without calling MLX, and the
// error surfaces where values are needed: Eval, the Read* methods, Err, and
// the boundaries of Compile and ValueAndGrad.
//
// # Memory
//
// Arrays are released deterministically with Free, or in bulk by a Scope,
// which frees every array created on the MLX thread while it was open except
// those kept. A cleanup attached to each Array frees forgotten handles when
// Go collects them, as a safety net only.
//
// # Threads
//
// MLX keeps per-thread state: default streams, the compile cache, command
// encoders and the random key. So all MLX work runs on one OS thread, which
// this package owns: a goroutine locked to it for the life of the process.
// Every function of the package is safe to call from any goroutine. A call
// made elsewhere is handed to the MLX thread and waited for, one call at a
// time; each handoff costs two OS thread wake-ups, about ten microseconds on
// a quiet machine and more on a busy one (BenchmarkDoHandoff; Handoffs
// counts them). Calls from different goroutines run one after another. A
// computation of many operations (a training step, a checkpoint load,
// sampling) should therefore run inside Do, which hands it over whole;
// inside Do, and in traced functions, calls run directly at the cost of a
// plain cgo call. A function passed to Do must not wait for another
// goroutine that itself does MLX work: that goroutine's calls queue behind
// it, and neither ever finishes.
//
// Because arrays, compiled functions and keys are all made and used on the
// one thread, they may be passed freely between goroutines: an array built
// by one goroutine can be evaluated by another, and MLX's "There is no
// Stream(cpu, 1) in current thread" failure cannot happen. Scopes belong to
// the MLX thread too: NewScope panics off it (use Run, or open the scope
// inside Do).
//
// The C bridge enforces the rule itself: every bridge function called from
// a thread other than the MLX thread does nothing and returns
// PTLM_OFF_THREAD, with a last error that names the function, the cause and
// the fix. This package then makes the call again on the MLX thread; C or
// C++ code that calls the bridge directly must likewise make its calls on
// that thread, for instance from a Go function passed to Do.
//
// # Custom kernels
//
// NewCUDAKernel defines a kernel written in CUDA C++ that MLX compiles at
// run time and launches as one graph operation. Wrapped by CustomVJP with
// a second kernel for its backward pass, it is a differentiable operation
// that traces into compiled steps like MLX's own (the model's kernels for
// attention's heads and RMSNorm's backward pass are built so). Kernels
// need the mlx-cuda library: CUDAAvailable says whether it is loaded.
package mlx
