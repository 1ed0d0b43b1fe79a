package main

import (
	"os"
	"path/filepath"
	"testing"
)

// pinnedPython returns the interpreter of the project's Python
// environment, .deps/py (make py-deps installs its pinned packages: the
// references and clients tests compare with); what names the test's need
// of it in the failure when it is missing.
func pinnedPython(t *testing.T, what string) string {
	t.Helper()
	py, err := filepath.Abs(filepath.Join("..", "..", ".deps", "py", "bin", "python"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(py); err != nil {
		t.Fatalf("%s needs %s: run `make py-deps` (installs the pinned Python packages into .deps/py)", what, py)
	}
	return py
}
