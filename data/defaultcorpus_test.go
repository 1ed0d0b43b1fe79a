package data

import (
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestFindGoSources(t *testing.T) {
	good := t.TempDir()
	writeFiles(t, good, map[string]string{"src/fmt/print.go": "package fmt\n"})
	bad := t.TempDir()
	noGo := func() (string, error) { return "", errors.New("go: not found") }
	goEnv := func(root string) func() (string, error) {
		return func() (string, error) { return root, nil }
	}
	for _, tc := range []struct {
		name    string
		env     string
		goEnv   func() (string, error)
		builtin string
		want    string
	}{
		{"env wins", good, goEnv(bad), bad, filepath.Join(good, "src")},
		{"go env next", bad, goEnv(good), bad, filepath.Join(good, "src")},
		{"builtin last", "", noGo, good, filepath.Join(good, "src")},
	} {
		got, err := findGoSources(tc.env, tc.goEnv, tc.builtin)
		if err != nil || got != tc.want {
			t.Errorf("%s: findGoSources = %q, %v; want %q", tc.name, got, err, tc.want)
		}
	}
	_, err := findGoSources(bad, noGo, "")
	if err == nil {
		t.Fatal("findGoSources with no usable GOROOT succeeded")
	}
	for _, want := range []string{bad, "go: not found", "runtime.GOROOT() is empty", "set GOROOT"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
}

func TestLoadDefaultCorpus(t *testing.T) {
	c, err := LoadDefaultCorpus()
	if err != nil {
		t.Fatal(err)
	}
	if c.Options.MaxBytes != DefaultCorpusMaxBytes || c.Bytes > DefaultCorpusMaxBytes {
		t.Errorf("default corpus: %d bytes under MaxBytes %d, want at most %d", c.Bytes, c.Options.MaxBytes, DefaultCorpusMaxBytes)
	}
	// The standard library is far larger than the cap, so the cap binds:
	// the corpus is at least most of it.
	if c.Bytes < DefaultCorpusMaxBytes/2 {
		t.Errorf("default corpus has only %d bytes, want close to %d", c.Bytes, DefaultCorpusMaxBytes)
	}
	got := rels(c)
	if !slices.IsSorted(got) {
		t.Error("default corpus files are not sorted by path")
	}
	for i, rel := range got {
		if !strings.HasSuffix(rel, ".go") || strings.HasSuffix(rel, "_test.go") || strings.Contains("/"+rel, "/testdata/") {
			t.Errorf("default corpus includes %q, want only non-test .go files outside testdata", rel)
		}
		text, err := c.ReadFile(i)
		if err != nil {
			t.Fatal(err)
		}
		if isGenerated(text) {
			t.Errorf("default corpus includes generated file %q", rel)
		}
	}
	dir, err := DefaultCorpus()
	if err != nil || dir != c.Root || filepath.Base(dir) != "src" {
		t.Errorf("DefaultCorpus() = %q, %v; want the corpus root %q ending in src", dir, err, c.Root)
	}
}
