// Package pyenv finds the project-local Python environments that tests use
// as independent references, and runs reference scripts in them. The
// environments live under .deps and are built by make; a test that needs
// one fails, never skips, naming the make target that builds it.
package pyenv

import (
	"encoding/binary"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/posttrainllm/posttrainllm/internal/realmodel"
)

// Reference returns the interpreter of .deps/py (make py-deps): the
// pinned numpy, safetensors, tokenizers, gguf, jinja2, tensorboard and
// openai packages.
func Reference(t testing.TB) string {
	t.Helper()
	return interpreter(t, "py", "py-deps", "numpy, safetensors, tokenizers, gguf, jinja2, tensorboard and openai")
}

// MLXLM returns the interpreter of .deps/mlxlm (make mlxlm-deps): mlx-lm
// over the MLX version posttrainllm builds against.
func MLXLM(t testing.TB) string {
	t.Helper()
	return interpreter(t, "mlxlm", "mlxlm-deps", "mlx and mlx-lm")
}

// interpreter is .deps/VENV/bin/python under the repository root, or a
// test failure saying how to build it.
func interpreter(t testing.TB, venv, target, holds string) string {
	t.Helper()
	p := filepath.Join(realmodel.Root(t), ".deps", venv, "bin", "python")
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("the Python reference needs %s: run `make %s` (installs the pinned %s into .deps/%s)", p, target, holds, venv)
	}
	return p
}

// Run runs script (a path relative to the test's package directory) with
// args under python and returns its standard output; a failure fails t
// with the script's output.
func Run(t testing.TB, python, script string, args ...string) []byte {
	t.Helper()
	cmd := exec.Command(python, append([]string{script}, args...)...)
	var stderr []byte
	out, err := cmd.Output()
	if ee, ok := err.(*exec.ExitError); ok {
		stderr = ee.Stderr
	}
	if err != nil {
		t.Fatalf("%s %v: %v\n%s%s", filepath.Base(script), args, err, out, stderr)
	}
	return out
}

// Logits runs a reference script's logits command, `SCRIPT logits PATH
// OUT TOKEN...`, through run (which runs the script with the arguments it
// is given), and returns the float32 logits [T·V] the script wrote to OUT,
// little-endian.
func Logits(t testing.TB, run func(testing.TB, ...string), path string, tokens []int32) []float32 {
	t.Helper()
	out := filepath.Join(t.TempDir(), "logits.f32")
	args := []string{"logits", path, out}
	for _, tok := range tokens {
		args = append(args, strconv.Itoa(int(tok)))
	}
	run(t, args...)
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	f := make([]float32, len(b)/4)
	for i := range f {
		f[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return f
}
