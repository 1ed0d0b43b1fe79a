package mlxtest

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/posttrainllm/posttrainllm/mlx"
)

// failingEnv makes TestHelperFailing fail inside Run, for the parent test.
const failingEnv = "MLXTEST_FAIL"

func TestHelperFailing(t *testing.T) {
	switch os.Getenv(failingEnv) {
	case "fatal":
		Run(t, func(t testing.TB) {
			t.Fatal("stop here")
			t.Log("not reached")
		})
		t.Log("after Run: not reached")
	case "skip":
		Run(t, func(t testing.TB) { t.Skip("skipped on the MLX thread") })
	}
}

// Fatal on the MLX thread fails the test and ends it, and the MLX thread
// keeps serving; Skip skips it.
func TestFatalAndSkipEndTheTest(t *testing.T) {
	for _, c := range []struct{ mode, want, not string }{
		{"fatal", "--- FAIL: TestHelperFailing", "not reached"},
		{"skip", "--- SKIP: TestHelperFailing", "FAIL"},
	} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestHelperFailing$", "-test.v", "-test.count=1")
		cmd.Env = append(os.Environ(), failingEnv+"="+c.mode)
		out, _ := cmd.CombinedOutput()
		if !strings.Contains(string(out), c.want) || strings.Contains(string(out), c.not) {
			t.Errorf("%s: output lacks %q or holds %q:\n%s", c.mode, c.want, c.not, out)
		}
	}
	// Cleanups run last first: this check runs after the one Run registers.
	var ran bool
	t.Cleanup(func() {
		if !ran {
			t.Error("the cleanup registered on the MLX thread did not run")
		}
	})
	Run(t, func(t testing.TB) {
		t.Cleanup(func() {
			if err := mlx.Do(func() error { ran = true; return nil }); err != nil {
				t.Error(err)
			}
		})
	})
}
