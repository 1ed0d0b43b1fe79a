package data

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"hash/crc32"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// testHash is a valid corpus hash for token files made in tests.
var testHash = func() string {
	sum := sha256.Sum256([]byte("test corpus"))
	return hex.EncodeToString(sum[:])
}()

// validTokenFile returns the bytes of a token file holding ids.
func validTokenFile(t testing.TB, meta TokenFileMeta, ids []int32) []byte {
	t.Helper()
	path := filepath.Join(t.TempDir(), "t.tok")
	if err := WriteTokenFile(path, meta, ids); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// tokenIDs returns every token of t.
func tokenIDs(t *Tokens) []int32 {
	ids := make([]int32, t.Len())
	t.CopyInto(ids, 0)
	return ids
}

func TestTokenFileRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		vocab int
		width int
		ids   []int32
	}{
		{256, 2, []int32{0, 1, 255, 72, 105}},
		{50257, 2, []int32{15496, 995, 50256, 0}},
		{65536, 2, []int32{65535, 0}},
		{100277, 4, []int32{100276, 65536, 0, 7}},
		{1000, 2, nil},
	} {
		meta := TokenFileMeta{Tokenizer: "tok-" + string(rune('a'+tc.width)), VocabSize: tc.vocab, CorpusHash: testHash}
		path := filepath.Join(t.TempDir(), "x.tok")
		if err := WriteTokenFile(path, meta, tc.ids); err != nil {
			t.Fatal(err)
		}
		st, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if want := int64(tokenHeaderSize + tc.width*len(tc.ids)); st.Size() != want {
			t.Errorf("vocab %d: file has %d bytes, want %d", tc.vocab, st.Size(), want)
		}
		tok, err := ReadTokenFile(path)
		if err != nil {
			t.Fatal(err)
		}
		info := tok.Info()
		if info.TokenFileMeta != meta || info.Width != tc.width || info.Count != len(tc.ids) || tok.Path() != path {
			t.Errorf("vocab %d: info %+v, want meta %+v width %d count %d", tc.vocab, info, meta, tc.width, len(tc.ids))
		}
		if got := tokenIDs(tok); !slices.Equal(got, tc.ids) {
			t.Errorf("vocab %d: tokens %v, want %v", tc.vocab, got, tc.ids)
		}
		for i, id := range tc.ids {
			if tok.At(i) != id {
				t.Errorf("vocab %d: At(%d) = %d, want %d", tc.vocab, i, tok.At(i), id)
			}
		}
		if err := tok.Close(); err != nil {
			t.Fatal(err)
		}
		if err := tok.Close(); err != nil {
			t.Errorf("second Close: %v", err)
		}
		matches, _ := filepath.Glob(filepath.Join(filepath.Dir(path), ".*tmp*"))
		if len(matches) != 0 {
			t.Errorf("temporary files left behind: %v", matches)
		}
	}
}

func TestWriteTokenFileRejects(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		meta TokenFileMeta
		ids  []int32
		want string
	}{
		{TokenFileMeta{"", 256, testHash}, nil, `tokenizer name ""`},
		{TokenFileMeta{"Byte", 256, testHash}, nil, `has 'B' at byte 0`},
		{TokenFileMeta{strings.Repeat("x", 25), 256, testHash}, nil, "want 1 to 24 characters"},
		{TokenFileMeta{"byte", 0, testHash}, nil, "vocabulary size 0"},
		{TokenFileMeta{"byte", 256, "abc"}, nil, `corpus hash "abc", want 64 hex digits`},
		{TokenFileMeta{"byte", 256, testHash}, []int32{1, 256}, "produced id 256, outside its vocabulary [0,256)"},
		{TokenFileMeta{"byte", 256, testHash}, []int32{-1}, "produced id -1"},
	} {
		path := filepath.Join(dir, "bad.tok")
		err := WriteTokenFile(path, tc.meta, tc.ids)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("WriteTokenFile(%+v, %v): err = %v, want it to contain %q", tc.meta, tc.ids, err, tc.want)
		}
		if _, err := os.Stat(path); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("failed write left %s behind", path)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("failed writes left files: %v", entries)
	}
}

// corruptions returns damaged variants of a valid token file, by name, with
// a phrase the error must contain.
func corruptions(valid []byte) map[string]struct {
	data []byte
	want string
} {
	mod := func(f func(b []byte) []byte) []byte { return f(slices.Clone(valid)) }
	fixHeader := func(b []byte) []byte {
		binary.LittleEndian.PutUint32(b[124:], crc32.Checksum(b[:124], castagnoli))
		return b
	}
	type variant = struct {
		data []byte
		want string
	}
	return map[string]variant{
		"empty":           {nil, "shorter than the 128-byte header"},
		"half header":     {valid[:60], "shorter than the 128-byte header"},
		"bad magic":       {mod(func(b []byte) []byte { b[0] = 'X'; return b }), "not a token file"},
		"future version":  {mod(func(b []byte) []byte { b[8] = 2; return fixHeader(b) }), "format version 2, want 1"},
		"header bit flip": {mod(func(b []byte) []byte { b[20] ^= 1; return b }), "corrupt header"},
		"truncated":       {valid[:len(valid)-1], "payload bytes (truncated or corrupt)"},
		"extended":        {append(slices.Clone(valid), 0, 0), "payload bytes (truncated or corrupt)"},
		"payload flip":    {mod(func(b []byte) []byte { b[tokenHeaderSize] ^= 4; return b }), "corrupt payload"},
		"wide width":      {mod(func(b []byte) []byte { b[12] = 4; return fixHeader(b) }), "token width 4 bytes, want 2"},
		"huge count": {mod(func(b []byte) []byte {
			binary.LittleEndian.PutUint64(b[16:], 1<<62)
			return fixHeader(b)
		}), "header says 4611686018427387904 tokens"},
		"small vocab": {mod(func(b []byte) []byte {
			binary.LittleEndian.PutUint32(b[24:], 10)
			return fixHeader(b)
		}), "outside the vocabulary [0,10)"},
		"reserved": {mod(func(b []byte) []byte { b[100] = 1; return fixHeader(b) }), "reserved header byte 100"},
		"name junk": {mod(func(b []byte) []byte {
			copy(b[32:], "gpt2\x00x")
			return fixHeader(b)
		}), "bytes after its NUL padding"},
		"bad name": {mod(func(b []byte) []byte {
			copy(b[32:], "GPT2")
			return fixHeader(b)
		}), `tokenizer name "GPT2"`},
	}
}

func TestReadTokenFileCorrupt(t *testing.T) {
	valid := validTokenFile(t, TokenFileMeta{"gpt2", 50257, testHash}, []int32{15496, 995, 50256, 13})
	dir := t.TempDir()
	for name, v := range corruptions(valid) {
		path := filepath.Join(dir, strings.ReplaceAll(name, " ", "_")+".tok")
		if err := os.WriteFile(path, v.data, 0o644); err != nil {
			t.Fatal(err)
		}
		tok, err := ReadTokenFile(path)
		if err == nil {
			tok.Close()
			t.Errorf("%s: ReadTokenFile succeeded, want error", name)
			continue
		}
		if !strings.Contains(err.Error(), v.want) || !strings.Contains(err.Error(), path) {
			t.Errorf("%s: error %q, want it to name the file and contain %q", name, err, v.want)
		}
	}
	_, err := ReadTokenFile(filepath.Join(dir, "missing.tok"))
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing file: err = %v, want fs.ErrNotExist", err)
	}
	if _, err := ReadTokenFile(dir); err == nil || !strings.Contains(err.Error(), "want a regular file") {
		t.Errorf("directory: err = %v, want a not-a-regular-file error", err)
	}
}

// FuzzReadTokenFile checks that ReadTokenFile never panics and that a file
// it accepts is self-consistent: its size matches Len and Width, and every
// token can be read and lies in the vocabulary.
func FuzzReadTokenFile(f *testing.F) {
	valid := validTokenFile(f, TokenFileMeta{"gpt2", 50257, testHash}, []int32{15496, 995, 50256, 13})
	f.Add(valid)
	for _, v := range corruptions(valid) {
		f.Add(v.data)
	}
	f.Add(validTokenFile(f, TokenFileMeta{"wide", 70000, testHash}, []int32{69999, 1, 2}))
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(t.TempDir(), "f.tok")
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		tok, err := ReadTokenFile(path)
		if err != nil {
			return
		}
		defer tok.Close()
		info := tok.Info()
		if tok.Len() != info.Count || tokenHeaderSize+tok.Len()*info.Width != len(data) {
			t.Fatalf("accepted %d-byte file with Len %d, Count %d, Width %d", len(data), tok.Len(), info.Count, info.Width)
		}
		ids := tokenIDs(tok)
		for i, id := range ids {
			if id < 0 || int(id) >= info.VocabSize || tok.At(i) != id {
				t.Fatalf("token %d = %d (At %d), vocabulary %d", i, id, tok.At(i), info.VocabSize)
			}
		}
	})
}
