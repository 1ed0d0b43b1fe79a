package data

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync/atomic"
	"testing"
	"time"
)

// countingTokenizer counts Encode calls, to tell cache hits from rebuilds.
type countingTokenizer struct {
	Tokenizer
	calls atomic.Int64
}

func (c *countingTokenizer) Encode(text string) []int32 {
	c.calls.Add(1)
	return c.Tokenizer.Encode(text)
}

// manyDocs writes n documents whose order is visible in their text.
func manyDocs(t *testing.T, n int) (string, []string) {
	t.Helper()
	dir := t.TempDir()
	files := make(map[string]string)
	var texts []string
	for i := range n {
		text := fmt.Sprintf("Document %03d says hello %d times.\n", i, i*i)
		files[fmt.Sprintf("doc%03d.txt", i)] = text
		texts = append(texts, text)
	}
	writeFiles(t, dir, files)
	return dir, texts
}

// collect runs EncodeCorpus and returns all emitted ids.
func collect(t *testing.T, c *Corpus, tok Tokenizer) ([]int32, error) {
	t.Helper()
	var all []int32
	err := EncodeCorpus(c, tok, func(ids []int32) error {
		all = append(all, ids...)
		return nil
	})
	return all, err
}

func TestEncodeCorpusOrderAndSeparators(t *testing.T) {
	dir, texts := manyDocs(t, 40)
	c, err := LoadCorpus(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range TokenizerNames() {
		tok, _ := NewTokenizer(name)
		var want []int32
		for i, text := range texts {
			if i > 0 {
				want = append(want, tok.EOT())
			}
			want = append(want, tok.Encode(text)...)
		}
		got, err := collect(t, c, tok)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s: EncodeCorpus gave %d ids, not the %d ids of the documents in order joined by EOT", name, len(got), len(want))
		}
	}
}

func TestEncodeCorpusDetectsChange(t *testing.T) {
	dir, _ := manyDocs(t, 5)
	c, err := LoadCorpus(dir)
	if err != nil {
		t.Fatal(err)
	}
	// Same size, different bytes: only the hash can tell.
	writeFiles(t, dir, map[string]string{"doc002.txt": "Document 002 says HELLO 4 times.\n"})
	if _, err := collect(t, c, byteTokenizer{}); !errors.Is(err, errCorpusChanged) {
		t.Errorf("after editing a document: err = %v, want errCorpusChanged", err)
	}
	os.Remove(filepath.Join(dir, "doc003.txt"))
	if _, err := collect(t, c, byteTokenizer{}); err == nil || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("after deleting a document: err = %v, want a not-exist error", err)
	}
}

func TestEncodeCorpusStopsOnEmitError(t *testing.T) {
	dir, _ := manyDocs(t, 60)
	c, err := LoadCorpus(dir)
	if err != nil {
		t.Fatal(err)
	}
	before := runtime.NumGoroutine()
	boom := errors.New("disk full")
	calls := 0
	err = EncodeCorpus(c, byteTokenizer{}, func([]int32) error {
		calls++
		if calls == 3 {
			return boom
		}
		return nil
	})
	if !errors.Is(err, boom) || calls != 3 {
		t.Errorf("EncodeCorpus = %v after %d emits, want %v after 3", err, calls, boom)
	}
	waitGoroutines(t, before)
}

// waitGoroutines fails unless the goroutine count drops to at most n
// within a few seconds of scheduling.
func waitGoroutines(t *testing.T, n int) {
	t.Helper()
	got := runtime.NumGoroutine()
	for i := 0; got > n && i < 200; i++ {
		time.Sleep(10 * time.Millisecond)
		got = runtime.NumGoroutine()
	}
	if got > n {
		t.Errorf("%d goroutines running, want at most %d", got, n)
	}
}
