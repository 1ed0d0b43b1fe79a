package main

import (
	"bytes"
	"regexp"
	"strconv"
	"testing"
)

// A shortened run of the example: held-out preference accuracy starts at
// one half (a fresh adapter ties every pair with its reference) and DPO
// raises it to at least 0.9, with one trace.
func TestPreferenceExampleRuns(t *testing.T) {
	var out bytes.Buffer
	if err := run(&out, "../../../shared/data/tinyshakespeare.txt", t.TempDir(), 40, 40); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	m := regexp.MustCompile(`held-out preference accuracy: ([0-9.]+) -> ([0-9.]+) over (\d+) pairs`).FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("no held-out accuracy line in:\n%s", out.String())
	}
	before, _ := strconv.ParseFloat(m[1], 64)
	after, _ := strconv.ParseFloat(m[2], 64)
	if before != 0.5 || after < 0.9 {
		t.Errorf("held-out preference accuracy %g -> %g, want 0.5 -> at least 0.9", before, after)
	}
	if m[3] != "64" {
		t.Errorf("%s held-out pairs, want 64", m[3])
	}
	if !bytes.Contains(out.Bytes(), []byte(", 1 trace(s)\n")) {
		t.Errorf("output lacks one trace:\n%s", out.String())
	}
	if err := run(&out, "../../../shared/data/tinyshakespeare.txt", t.TempDir(), 10, 1); err == nil {
		t.Error("-dpo-steps 1 accepted")
	}
}
