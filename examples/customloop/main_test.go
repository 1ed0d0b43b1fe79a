package main

import (
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// The example builds, runs a few steps with -steps, learns its pattern and
// traces its step once.
func TestCustomLoopRuns(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "customloop")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "-steps", "40").CombinedOutput()
	if err != nil {
		t.Fatalf("customloop -steps 40: %v\n%s", err, out)
	}
	var losses []float64
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) == 6 && f[0] == "step" {
			v, err := strconv.ParseFloat(f[5], 64)
			if err != nil {
				t.Fatalf("line %q: %v", line, err)
			}
			losses = append(losses, v)
		}
	}
	if len(losses) != 5 {
		t.Fatalf("want 5 loss lines (steps 1, 11, 21, 31, 40), got:\n%s", out)
	}
	if !(losses[len(losses)-1] < losses[0]-0.5) {
		t.Fatalf("loss did not fall: %v", losses)
	}
	if !strings.Contains(string(out), "traces 1\n") {
		t.Fatalf("the step was traced more than once:\n%s", out)
	}
	if out, err := exec.Command(bin, "-steps", "0").CombinedOutput(); err == nil {
		t.Fatalf("-steps 0 accepted:\n%s", out)
	}
}
