package main

import (
	"bytes"
	"regexp"
	"strconv"
	"testing"
)

// A shortened run of the example: GRPO with the Go vowel reward raises
// the held-out mean reward, with one trace of the step.
func TestGRPOExampleRuns(t *testing.T) {
	var out bytes.Buffer
	if err := run(&out, "../../../shared/data/tinyshakespeare.txt", t.TempDir(), 50, 10); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	m := regexp.MustCompile(`held-out mean reward: ([0-9.]+) -> ([0-9.]+) \((\d+) updates, (\d+) trace\(s\)\)`).FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("no held-out reward line in:\n%s", out.String())
	}
	before, _ := strconv.ParseFloat(m[1], 64)
	after, _ := strconv.ParseFloat(m[2], 64)
	if after < before+0.2 {
		t.Errorf("held-out mean reward %g -> %g, want a rise of at least 0.2", before, after)
	}
	if m[3] != "10" || m[4] != "1" {
		t.Errorf("%s updates, %s traces; want 10 and 1", m[3], m[4])
	}
	if err := run(&out, "../../../shared/data/tinyshakespeare.txt", t.TempDir(), 10, 0); err == nil {
		t.Error("-updates 0 accepted")
	}
}
