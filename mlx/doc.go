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
// which frees every array created on its OS thread while it was open except
// those kept. A cleanup attached to each Array frees forgotten handles when Go
// collects them, as a safety net only.
//
// # Threads
//
// MLX keeps per-thread state (default streams, the compile cache, command
// encoders). All MLX work of one model must run on one OS thread: lock the
// owning goroutine with runtime.LockOSThread for its whole life.
package mlx
