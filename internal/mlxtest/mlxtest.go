// Package mlxtest runs test code on the MLX thread. Tests that build and
// read MLX arrays themselves, rather than through entry points that hand
// their work to the thread (mlx.Do), run that code with Run.
package mlxtest

import (
	"fmt"
	"strings"
	"testing"

	"github.com/posttrainllm/posttrainllm/mlx"
)

// stop is the panic that ends fn when it calls FailNow (or Fatal) or
// SkipNow (or Skip) on the MLX thread; Run repeats the call on the test's
// goroutine. The testing package ends a test with runtime.Goexit, which
// would end the MLX thread's goroutine instead.
const (
	stopFail = "mlxtest: FailNow on the MLX thread"
	stopSkip = "mlxtest: SkipNow on the MLX thread"
)

// onThread is the testing.TB that fn sees: failures and logs go to the
// test; FailNow and SkipNow panic instead of ending the goroutine, and
// cleanups run on the MLX thread like the code that registered them.
type onThread struct{ testing.TB }

// FailNow marks the test failed and ends fn.
func (t onThread) FailNow() { t.TB.Fail(); panic(stopFail) }

// Fatal is Error followed by FailNow.
func (t onThread) Fatal(args ...any) { t.TB.Helper(); t.TB.Error(args...); panic(stopFail) }

// Fatalf is Errorf followed by FailNow.
func (t onThread) Fatalf(format string, args ...any) {
	t.TB.Helper()
	t.TB.Errorf(format, args...)
	panic(stopFail)
}

// SkipNow ends fn and then skips the test.
func (t onThread) SkipNow() { panic(stopSkip) }

// Skip is Log followed by SkipNow.
func (t onThread) Skip(args ...any) { t.TB.Helper(); t.TB.Log(args...); panic(stopSkip) }

// Skipf is Logf followed by SkipNow.
func (t onThread) Skipf(format string, args ...any) {
	t.TB.Helper()
	t.TB.Logf(format, args...)
	panic(stopSkip)
}

// Cleanup registers f to run on the MLX thread when the test ends.
func (t onThread) Cleanup(f func()) {
	t.TB.Cleanup(func() { mlx.Do(func() error { f(); return nil }) })
}

// Run runs fn on the MLX thread (mlx.Do) and returns when it has. fn gets
// a testing.TB that reports to t; its Fatal, FailNow and Skip end fn and
// then the test. fn must not call t.Run: a subtest's goroutine would wait
// for the MLX thread, which waits for the subtest.
func Run(t testing.TB, fn func(t testing.TB)) {
	t.Helper()
	defer func() {
		r := recover()
		if r == nil {
			return
		}
		switch msg := fmt.Sprint(r); {
		case strings.Contains(msg, stopFail):
			t.FailNow()
		case strings.Contains(msg, stopSkip):
			t.SkipNow()
		}
		panic(r)
	}()
	mlx.Do(func() error {
		fn(onThread{t})
		return nil
	})
}
