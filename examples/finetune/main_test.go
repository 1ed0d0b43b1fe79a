package main

import (
	"bytes"
	"regexp"
	"strconv"
	"testing"
)

// A shortened run of the example: the held-out completion loss falls,
// the base checkpoint is unchanged and the fine-tune's step traced once.
func TestFineTuneExampleRuns(t *testing.T) {
	var out bytes.Buffer
	if err := run(&out, "../../../shared/data/tinyshakespeare.txt", t.TempDir(), 40, 30); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	m := regexp.MustCompile(`held-out completion loss: ([0-9.]+) -> ([0-9.]+)`).FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("no held-out loss line in:\n%s", out.String())
	}
	before, _ := strconv.ParseFloat(m[1], 64)
	after, _ := strconv.ParseFloat(m[2], 64)
	if !(after < before) {
		t.Errorf("held-out completion loss %g -> %g, want it to fall", before, after)
	}
	for _, want := range []string{"base unchanged: true\n", ", 1 trace(s)\n"} {
		if !bytes.Contains(out.Bytes(), []byte(want)) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	if err := run(&out, "../../../shared/data/tinyshakespeare.txt", t.TempDir(), 0, 30); err == nil {
		t.Error("-pretrain-steps 0 accepted")
	}
}
