package main

import (
	"bytes"
	"regexp"
	"strconv"
	"testing"
)

// A shortened run of the example: an objective defined outside package
// train fine-tunes through the loop with one trace of its step, its
// named auxiliary metric reaches the metrics, and both its loss and the
// held-out loss fall.
func TestObjectiveExampleRuns(t *testing.T) {
	var out bytes.Buffer
	if err := run(&out, "../../../shared/data/tinyshakespeare.txt", t.TempDir(), 40, 30); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	m := regexp.MustCompile(`sft-smoothed: 30 updates, loss ([0-9.]+) -> ([0-9.]+), nll ([0-9.]+) -> ([0-9.]+), 1 trace\(s\)`).FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("no training line with one trace in:\n%s", out.String())
	}
	v := make([]float64, 4)
	for i := range v {
		v[i], _ = strconv.ParseFloat(m[i+1], 64)
	}
	if !(v[1] < v[0]) || !(v[3] < v[2]) {
		t.Errorf("loss %g -> %g, nll %g -> %g: want both to fall", v[0], v[1], v[2], v[3])
	}
	// The uniform term, mean −log p over the vocabulary, is at least
	// log V (Jensen), above the NLL of any model better than uniform: the
	// smoothed loss lies above the NLL.
	if !(v[0] > v[2]) {
		t.Errorf("first loss %g, nll %g: want the smoothed loss above the NLL", v[0], v[2])
	}
	h := regexp.MustCompile(`held-out completion loss: ([0-9.]+) -> ([0-9.]+)`).FindStringSubmatch(out.String())
	if h == nil {
		t.Fatalf("no held-out loss line in:\n%s", out.String())
	}
	before, _ := strconv.ParseFloat(h[1], 64)
	after, _ := strconv.ParseFloat(h[2], 64)
	if !(after < before) {
		t.Errorf("held-out loss %g -> %g, want it to fall", before, after)
	}
}
