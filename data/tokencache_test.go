package data

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestDefaultCacheDir(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", "/var/cache/me")
	if got, err := DefaultCacheDir(); err != nil || got != filepath.FromSlash("/var/cache/me/posttrainllm/tokens") {
		t.Errorf("with XDG_CACHE_HOME: DefaultCacheDir() = %q, %v", got, err)
	}
	home := t.TempDir()
	t.Setenv("HOME", home)
	for _, xdg := range []string{"", "relative/cache"} {
		t.Setenv("XDG_CACHE_HOME", xdg)
		if got, err := DefaultCacheDir(); err != nil || got != filepath.Join(home, ".cache", "posttrainllm", "tokens") {
			t.Errorf("XDG_CACHE_HOME=%q: DefaultCacheDir() = %q, %v; want under HOME %s", xdg, got, err, home)
		}
	}
}

func TestOpenTokensBuildsOnceAndReuses(t *testing.T) {
	dir, texts := manyDocs(t, 10)
	c, err := LoadCorpus(dir)
	if err != nil {
		t.Fatal(err)
	}
	cache := t.TempDir()
	tok := &countingTokenizer{Tokenizer: byteTokenizer{}}

	first, err := OpenTokens(c, tok, cache)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	built := tok.calls.Load()
	if built != int64(len(texts)) {
		t.Errorf("first open encoded %d documents, want %d", built, len(texts))
	}
	want := []byte(strings.Join(texts, "\x00"))
	if got := tokenIDs(first); len(got) != len(want) {
		t.Fatalf("cached tokens: %d, want %d", len(got), len(want))
	}
	wantPath := filepath.Join(cache, CacheFileName(c, tok))
	if first.Path() != wantPath || !strings.Contains(wantPath, "byte-"+c.Hash+".v1.tok") {
		t.Errorf("token file at %q, want %q", first.Path(), wantPath)
	}
	st1, err := os.Stat(wantPath)
	if err != nil {
		t.Fatal(err)
	}

	second, err := OpenTokens(c, tok, cache)
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	if tok.calls.Load() != built {
		t.Errorf("reopening encoded %d more documents, want 0 (cache hit)", tok.calls.Load()-built)
	}
	st2, _ := os.Stat(wantPath)
	if !os.SameFile(st1, st2) {
		t.Error("reopening replaced the cached file")
	}
	if !slices.Equal(tokenIDs(first), tokenIDs(second)) {
		t.Error("cached tokens differ from freshly built ones")
	}
	info := second.Info()
	if info.Tokenizer != "byte" || info.VocabSize != 256 || info.CorpusHash != c.Hash || info.Width != 2 {
		t.Errorf("cached file info %+v", info)
	}
}

func TestOpenTokensRebuilds(t *testing.T) {
	dir, texts := manyDocs(t, 4)
	c, err := LoadCorpus(dir)
	if err != nil {
		t.Fatal(err)
	}
	cache := t.TempDir()
	tok := &countingTokenizer{Tokenizer: byteTokenizer{}}
	path := filepath.Join(cache, CacheFileName(c, tok))
	wantLen := len(strings.Join(texts, "\x00"))

	for _, tc := range []struct {
		name  string
		plant func() // puts a bad file at the cache path
	}{
		{"missing", func() {}},
		{"stale key", func() {
			// A valid token file, but for another corpus.
			if err := WriteTokenFile(path, TokenFileMeta{"byte", 256, testHash}, []int32{1, 2, 3}); err != nil {
				t.Fatal(err)
			}
		}},
		{"other vocabulary", func() {
			if err := WriteTokenFile(path, TokenFileMeta{"byte", 300, c.Hash}, []int32{1, 2, 3}); err != nil {
				t.Fatal(err)
			}
		}},
		{"corrupt", func() {
			if err := os.WriteFile(path, []byte("PTLMTOK1 but nothing else of use"), 0o644); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		os.Remove(path)
		tc.plant()
		before := tok.calls.Load()
		got, err := OpenTokens(c, tok, cache)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if tok.calls.Load()-before != int64(len(texts)) {
			t.Errorf("%s: encoded %d documents, want a rebuild of all %d", tc.name, tok.calls.Load()-before, len(texts))
		}
		if got.Len() != wantLen || got.Info().CorpusHash != c.Hash || got.Info().VocabSize != 256 {
			t.Errorf("%s: rebuilt file has %d tokens and info %+v, want %d tokens for corpus %s", tc.name, got.Len(), got.Info(), wantLen, c.Hash)
		}
		got.Close()
	}
}

func TestOpenTokensKeys(t *testing.T) {
	dir, _ := manyDocs(t, 3)
	old, err := LoadCorpus(dir)
	if err != nil {
		t.Fatal(err)
	}
	writeFiles(t, dir, map[string]string{"doc001.txt": "changed\n"})
	c, err := LoadCorpus(dir)
	if err != nil {
		t.Fatal(err)
	}
	cache := t.TempDir()
	gpt2, _ := NewTokenizer("gpt2")
	paths := make(map[string]bool)
	for _, tok := range []Tokenizer{byteTokenizer{}, gpt2} {
		got, err := OpenTokens(c, tok, cache)
		if err != nil {
			t.Fatal(err)
		}
		paths[got.Path()] = true
		if got.Info().Tokenizer != tok.Name() || got.Info().VocabSize != tok.VocabSize() {
			t.Errorf("file for %s records %+v", tok.Name(), got.Info())
		}
		got.Close()
	}
	if len(paths) != 2 {
		t.Errorf("two tokenizers shared a cache file: %v", paths)
	}
	if CacheFileName(old, gpt2) == CacheFileName(c, gpt2) {
		t.Error("two versions of a corpus map to one cache file name")
	}
	// The old corpus's files changed on disk after it was loaded, so it
	// cannot be tokenized; the failed build must leave nothing behind.
	_, err = OpenTokens(old, gpt2, cache)
	if !errors.Is(err, errCorpusChanged) {
		t.Errorf("OpenTokens of a corpus changed since loading: err = %v, want errCorpusChanged", err)
	}
	if entries, _ := os.ReadDir(cache); len(entries) != 2 {
		t.Errorf("cache holds %d entries after a failed build, want the 2 good files", len(entries))
	}
}

func TestOpenTokensDefaultCacheDir(t *testing.T) {
	xdg := t.TempDir()
	t.Setenv("XDG_CACHE_HOME", xdg)
	dir, _ := manyDocs(t, 2)
	c, err := LoadCorpus(dir)
	if err != nil {
		t.Fatal(err)
	}
	got, err := OpenTokens(c, byteTokenizer{}, "")
	if err != nil {
		t.Fatal(err)
	}
	defer got.Close()
	if want := filepath.Join(xdg, "posttrainllm", "tokens"); filepath.Dir(got.Path()) != want {
		t.Errorf("token file in %q, want %q", filepath.Dir(got.Path()), want)
	}
}

func TestOpenTokensBadTokenizerName(t *testing.T) {
	dir, _ := manyDocs(t, 1)
	c, err := LoadCorpus(dir)
	if err != nil {
		t.Fatal(err)
	}
	_, err = OpenTokens(c, namedTokenizer{byteTokenizer{}, "../escape"}, t.TempDir())
	if err == nil || !strings.Contains(err.Error(), `"../escape"`) {
		t.Errorf("tokenizer name with a path separator: err = %v", err)
	}
}

// namedTokenizer renames a tokenizer.
type namedTokenizer struct {
	Tokenizer
	name string
}

func (n namedTokenizer) Name() string { return n.name }
