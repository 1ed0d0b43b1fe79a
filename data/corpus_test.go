package data

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeFiles creates files under dir from a map of slash paths to contents.
func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for rel, text := range files {
		p := filepath.Join(dir, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// rels returns the Rel of every file of c.
func rels(c *Corpus) []string {
	var out []string
	for _, f := range c.Files {
		out = append(out, f.Rel)
	}
	return out
}

func TestLoadCorpusDirectory(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"b.txt":          "bee\n",
		"a/z.md":         "# zed\n",
		"a/y.go":         "package y\n",
		"a-c.py":         "print(1)\n",
		"image.png":      "not collected by extension",
		"binary.txt":     "has a \x00 NUL",
		"latin1.txt":     "caf\xe9",
		"empty.txt":      "",
		".hidden/x.txt":  "hidden dir",
		".dotfile.txt":   "hidden file",
		"UPPER.TXT":      "upper-case extension\n",
		"deep/er/est.rs": "fn main() {}\n",
	})
	c, err := LoadCorpus(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"UPPER.TXT", "a-c.py", "a/y.go", "a/z.md", "b.txt", "deep/er/est.rs"}
	if got := rels(c); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("files = %v, want %v", got, want)
	}
	if c.Skipped != 2 {
		t.Errorf("Skipped = %d, want 2 (NUL and invalid UTF-8)", c.Skipped)
	}
	var total int64
	for i, f := range c.Files {
		text, err := c.ReadFile(i)
		if err != nil {
			t.Fatal(err)
		}
		if int64(len(text)) != f.Size {
			t.Errorf("%s: read %d bytes, Size %d", f.Rel, len(text), f.Size)
		}
		total += f.Size
	}
	if c.Bytes != total {
		t.Errorf("Bytes = %d, want %d", c.Bytes, total)
	}
	if len(c.Hash) != 64 {
		t.Errorf("Hash = %q, want 64 hex digits", c.Hash)
	}
}

func TestLoadCorpusSingleFile(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"corpus.data": "any extension is fine for a named file\n"})
	c, err := LoadCorpus(filepath.Join(dir, "corpus.data"))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Files) != 1 || c.Files[0].Rel != "corpus.data" || c.Bytes != 39 {
		t.Errorf("single-file corpus: files %v, %d bytes", rels(c), c.Bytes)
	}
}

func TestCorpusHash(t *testing.T) {
	load := func(files map[string]string, opts CorpusOptions) string {
		t.Helper()
		dir := t.TempDir()
		writeFiles(t, dir, files)
		c, err := LoadCorpusWith(dir, opts)
		if err != nil {
			t.Fatal(err)
		}
		return c.Hash
	}
	base := map[string]string{"a.txt": "alpha\n", "b.txt": "beta\n"}
	h := load(base, CorpusOptions{})
	if h2 := load(base, CorpusOptions{}); h2 != h {
		t.Errorf("same files in another directory hash %s, want %s", h2, h)
	}
	for name, tc := range map[string]struct {
		files map[string]string
		opts  CorpusOptions
	}{
		"content":  {map[string]string{"a.txt": "alpha\n", "b.txt": "Beta\n"}, CorpusOptions{}},
		"rename":   {map[string]string{"a.txt": "alpha\n", "c.txt": "beta\n"}, CorpusOptions{}},
		"boundary": {map[string]string{"a.txt": "alpha\nb", "b.txt": "eta\n"}, CorpusOptions{}},
		"max":      {base, CorpusOptions{MaxBytes: 1 << 20}},
		"ext":      {base, CorpusOptions{Extensions: []string{".txt"}}},
		"tests":    {base, CorpusOptions{ExcludeTests: true}},
		"gen":      {base, CorpusOptions{ExcludeGenerated: true}},
	} {
		if got := load(tc.files, tc.opts); got == h {
			t.Errorf("%s: hash unchanged", name)
		}
	}
}

func TestLoadCorpusMaxBytes(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"1.txt": "aaaa", "2.txt": "bbbb", "3.txt": "c", "4.txt": "dddd"})
	c, err := LoadCorpusWith(dir, CorpusOptions{MaxBytes: 9})
	if err != nil {
		t.Fatal(err)
	}
	// 1+2+3 = 9 bytes fit; 4 would take the total to 13.
	if got := strings.Join(rels(c), " "); got != "1.txt 2.txt 3.txt" || c.Bytes != 9 {
		t.Errorf("MaxBytes 9: files %q (%d bytes), want 1.txt 2.txt 3.txt (9 bytes)", got, c.Bytes)
	}
	c, err = LoadCorpusWith(dir, CorpusOptions{MaxBytes: 7})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(rels(c), " "); got != "1.txt" {
		t.Errorf("MaxBytes 7: files %q, want 1.txt (the prefix stops at 2.txt)", got)
	}
	_, err = LoadCorpusWith(dir, CorpusOptions{MaxBytes: 3})
	if err == nil || !strings.Contains(err.Error(), "MaxBytes 3") || !strings.Contains(err.Error(), `"1.txt" has 4 bytes`) {
		t.Errorf("MaxBytes below the first file: err = %v, want it to name the file, its size and the cap", err)
	}
	_, err = LoadCorpusWith(dir, CorpusOptions{MaxBytes: -1})
	if err == nil || !strings.Contains(err.Error(), "MaxBytes is -1") {
		t.Errorf("negative MaxBytes: err = %v", err)
	}
}

func TestLoadCorpusExcludeTestsAndGenerated(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"p/p.go":             "package p\n",
		"p/p_test.go":        "package p\n",
		"p/testdata/x.go":    "package x\n",
		"p/testdatum/ok.go":  "package ok\n",
		"p/notes.txt":        "not go\n",
		"p/tables.go":        "// Copyright\n\n// Code generated by mkt. DO NOT EDIT.\n\npackage p\n",
		"q/q_test_helper.go": "package q\n",
	})
	c, err := LoadCorpusWith(dir, CorpusOptions{Extensions: []string{".go"}, ExcludeTests: true, ExcludeGenerated: true})
	if err != nil {
		t.Fatal(err)
	}
	want := "p/p.go p/testdatum/ok.go q/q_test_helper.go"
	if got := strings.Join(rels(c), " "); got != want {
		t.Errorf("files = %q, want %q", got, want)
	}
	c, err = LoadCorpusWith(dir, CorpusOptions{Extensions: []string{".go"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Files) != 6 {
		t.Errorf("without exclusions: files %q, want all 6 .go files", rels(c))
	}
}

func TestIsGenerated(t *testing.T) {
	for text, want := range map[string]bool{
		"// Code generated by stringer; DO NOT EDIT.\n\npackage p\n":        true,
		"// Copyright 2024\r\n\r\n// Code generated by x. DO NOT EDIT.\r\n": true,
		"package p\n\n// Code generated by x. DO NOT EDIT.\n":               false,
		"// Code generated by x. DO NOT EDIT\npackage p\n":                  false,
		"/* Code generated by x. DO NOT EDIT. */\n":                         false,
		"// This file was generated.\npackage p\n":                          false,
		"": false,
	} {
		if got := isGenerated([]byte(text)); got != want {
			t.Errorf("isGenerated(%q) = %v, want %v", text, got, want)
		}
	}
}

func TestLoadCorpusErrors(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"empty/a.txt":     "",
		"empty/b.md":      "",
		"notext/x.bin":    "data",
		"notext/nul.txt":  "a\x00b",
		"binary.txt":      "\x00\x01\x02",
		"emptyfile.txt":   "",
		"nested/only/.md": "hidden",
	})
	for _, tc := range []struct {
		name string
		path string
		want []string
	}{
		{"missing", filepath.Join(dir, "nope"), []string{"nope", "no such file or directory"}},
		{"empty dir of text files", filepath.Join(dir, "empty"), []string{"empty", "2 text files with 0 bytes"}},
		{"empty file", filepath.Join(dir, "emptyfile.txt"), []string{"emptyfile.txt", "0 bytes"}},
		{"no text files", filepath.Join(dir, "notext"), []string{"no text files", ".txt", "skipped 1 files with NUL"}},
		{"nothing at all", filepath.Join(dir, "nested"), []string{"no text files"}},
		{"binary file", filepath.Join(dir, "binary.txt"), []string{"not a text file", "NUL byte at offset 0"}},
	} {
		_, err := LoadCorpus(tc.path)
		if err == nil {
			t.Errorf("%s: LoadCorpus(%q) succeeded, want error", tc.name, tc.path)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q does not mention %q", tc.name, err, w)
			}
		}
	}
	_, err := LoadCorpus(filepath.Join(dir, "nope"))
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing corpus error %v does not wrap fs.ErrNotExist", err)
	}
}

func TestLoadCorpusUnreadableFile(t *testing.T) {
	if os.Geteuid() == 0 {
		// Root reads mode-000 files anyway, so make the file unreadable by
		// turning it into a directory after loading, which is what reading
		// for tokenization then meets.
		dir := t.TempDir()
		writeFiles(t, dir, map[string]string{"a.txt": "x"})
		c, err := LoadCorpus(dir)
		if err != nil {
			t.Fatal(err)
		}
		os.Remove(filepath.Join(dir, "a.txt"))
		os.Mkdir(filepath.Join(dir, "a.txt"), 0o755)
		if _, err := c.ReadFile(0); err == nil || !strings.Contains(err.Error(), "a.txt") {
			t.Errorf("reading a file that became a directory: err = %v, want one naming a.txt", err)
		}
		return
	}
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"a.txt": "secret"})
	if err := os.Chmod(filepath.Join(dir, "a.txt"), 0); err != nil {
		t.Fatal(err)
	}
	_, err := LoadCorpus(dir)
	if err == nil || !strings.Contains(err.Error(), "a.txt") || !errors.Is(err, fs.ErrPermission) {
		t.Errorf("unreadable file: err = %v, want a permission error naming a.txt", err)
	}
}

func TestCorpusReadFileDetectsChange(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"a.txt": "one"})
	c, err := LoadCorpus(dir)
	if err != nil {
		t.Fatal(err)
	}
	writeFiles(t, dir, map[string]string{"a.txt": "three"})
	if _, err := c.ReadFile(0); !errors.Is(err, errCorpusChanged) || !strings.Contains(err.Error(), `"a.txt" has 5 bytes, was 3`) {
		t.Errorf("ReadFile after growth: err = %v, want a size-change error", err)
	}
	if _, err := c.ReadFile(1); err == nil || !strings.Contains(err.Error(), "document 1 out of range [0,1)") {
		t.Errorf("ReadFile(1): err = %v", err)
	}
}
