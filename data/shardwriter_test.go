package data

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestShardWriterCutsValThenTrainShards(t *testing.T) {
	dir := t.TempDir()
	prefix := filepath.Join(dir, "corpus")
	w, err := NewShardWriter(prefix, 300, 10, 7)
	if err != nil {
		t.Fatal(err)
	}
	var all []int32
	for n := range 9 { // writes of 0..8 ids: 36 in all, crossing shard ends mid-write
		ids := make([]int32, n)
		for i := range ids {
			ids[i] = int32(len(all) + i)
		}
		all = append(all, ids...)
		if err := w.Write(ids); err != nil {
			t.Fatal(err)
		}
	}
	paths, err := w.Close()
	if err != nil {
		t.Fatal(err)
	}
	want := []string{prefix + "_val_000000.bin", prefix + "_train_000000.bin", prefix + "_train_000001.bin", prefix + "_train_000002.bin"}
	if !slices.Equal(paths, want) {
		t.Fatalf("paths %v, want %v", paths, want)
	}
	wantLens := []int{7, 10, 10, 9}
	var back []int32
	for k, p := range paths {
		tok, err := OpenShard(p)
		if err != nil {
			t.Fatal(err)
		}
		if tok.Len() != wantLens[k] {
			t.Errorf("%s holds %d tokens, want %d", p, tok.Len(), wantLens[k])
		}
		ids := make([]int32, tok.Len())
		tok.CopyInto(ids, 0)
		back = append(back, ids...)
		tok.Close()
	}
	if !slices.Equal(back, all) || w.Tokens() != int64(len(all)) {
		t.Fatalf("shards hold %v (Tokens %d), want %v", back, w.Tokens(), all)
	}
	if _, err := NewShardWriter(prefix, 300, 10, 0); err == nil || !strings.Contains(err.Error(), "exists already") {
		t.Fatalf("second NewShardWriter at the same prefix = %v, want an exists-already error", err)
	}
}

func TestNewShardWriterRejectsBadSettings(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		prefix            string
		vocab, shard, val int
		want              string
	}{
		{filepath.Join(dir, "x"), 100, 0, 0, "shard size 0"},
		{filepath.Join(dir, "x"), 100, 10, -1, "validation shard size -1"},
		{filepath.Join(dir, "x"), 0, 10, 0, "vocabulary size 0"},
		{filepath.Join(dir, "missing", "x"), 100, 10, 0, "shard folder"},
	} {
		if _, err := NewShardWriter(tc.prefix, tc.vocab, tc.shard, tc.val); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("NewShardWriter(%q, %d, %d, %d) = %v, want an error containing %q", tc.prefix, tc.vocab, tc.shard, tc.val, err, tc.want)
		}
	}
}

func TestReadJSONL(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.jsonl")
	if err := os.WriteFile(good, []byte("{\"text\":\"a\\nb\",\"id\":1}\n\n{\"text\":\"é\"}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var got []string
	if err := ReadJSONL(good, "text", func(s string) error { got = append(got, s); return nil }); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, []string{"a\nb", "é"}) {
		t.Fatalf("ReadJSONL read %q", got)
	}
	for body, want := range map[string]string{
		"{\"text\":\"a\"}\nnot json\n": "line 2",
		"{\"body\":\"a\"}\n":           `line 1: no "text" field`,
		"{\"text\":3}\n":               `field "text" is 3, want a string`,
	} {
		bad := filepath.Join(dir, "bad.jsonl")
		if err := os.WriteFile(bad, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		err := ReadJSONL(bad, "text", func(string) error { return nil })
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ReadJSONL(%q) = %v, want an error containing %q", body, err, want)
		}
	}
}

func TestEncodeDocumentsPrefixesEOTInOrder(t *testing.T) {
	tok := byteTokenizer{}
	docs := []string{"ab", "", "xyz", "q"}
	got := EncodeDocuments(tok, docs)
	for i, d := range docs {
		want := append([]int32{tok.EOT()}, tok.Encode(d)...)
		if !slices.Equal(got[i], want) {
			t.Fatalf("document %d: %v, want %v", i, got[i], want)
		}
	}
}
