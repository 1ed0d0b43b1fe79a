package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCPUProfileWritesNewFileOnly(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "cpu.pprof")
	ran := false
	if err := withCPUProfile(path, func() error { ran = true; return nil }); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(path); err != nil || st.Size() == 0 || !ran {
		t.Fatalf("profile not written (ran %v, stat %v, err %v)", ran, st, err)
	}
	// A second run must not overwrite the first profile.
	before, _ := os.ReadFile(path)
	ran = false
	err := withCPUProfile(path, func() error { ran = true; return nil })
	if err == nil || ran || !strings.Contains(err.Error(), path) {
		t.Fatalf("existing file: err %v, ran %v; want a usage error naming %s and nothing run", err, ran, path)
	}
	if after, _ := os.ReadFile(path); string(after) != string(before) {
		t.Fatal("existing profile was changed")
	}
}
