// Package mlxtest runs test code on the MLX thread. Tests that build and
// read MLX arrays themselves, rather than through entry points that hand
// their work to the thread (mlx.Do), run that code with Run.
package mlxtest

import (
	"testing"

	"github.com/posttrainllm/posttrainllm/mlx"
)

// onThread is the testing.TB that fn sees: everything goes to the test,
// and cleanups run on the MLX thread like the code that registered them.
type onThread struct{ testing.TB }

// Cleanup registers f to run on the MLX thread when the test ends.
func (t onThread) Cleanup(f func()) {
	t.TB.Cleanup(func() { mlx.Do(func() error { f(); return nil }) })
}

// Run runs fn on the MLX thread (mlx.Do) and returns when it has. Fatal,
// FailNow and Skip in fn end fn and then the test: they end fn with
// runtime.Goexit, which Do passes on to the test's goroutine while the MLX
// thread keeps serving. fn must not call t.Run: a subtest's goroutine
// would wait for the MLX thread, which waits for the subtest.
func Run(t testing.TB, fn func(t testing.TB)) {
	t.Helper()
	mlx.Do(func() error {
		fn(onThread{t})
		return nil
	})
}

// RequireGPU fails t unless MLX has a GPU: the GPU tests (built with -tags
// gpu) fail, never skip, where none is visible.
func RequireGPU(t testing.TB) {
	t.Helper()
	if !mlx.GPU.Available() {
		t.Fatal("no GPU: this libmlx.so has no GPU backend or no device is visible (on Linux, run with LD_LIBRARY_PATH at mlx-cuda-13's mlx/lib)")
	}
}
