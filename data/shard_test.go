package data

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// llmcShard builds a shard byte for byte as llm.c's write_datafile does:
// 256 int32 (magic, version, count, zeros), then the tokens.
func llmcShard(magic, version int32, width int, ids []uint32) []byte {
	header := make([]int32, 256)
	header[0], header[1], header[2] = magic, version, int32(len(ids))
	b := binary.LittleEndian.AppendUint32(nil, uint32(header[0]))
	for _, h := range header[1:] {
		b = binary.LittleEndian.AppendUint32(b, uint32(h))
	}
	for _, id := range ids {
		if width == 2 {
			b = binary.LittleEndian.AppendUint16(b, uint16(id))
		} else {
			b = binary.LittleEndian.AppendUint32(b, id)
		}
	}
	return b
}

func TestWriteShardMatchesLLMCLayout(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		vocab          int
		magic, version int32
		width          int
		ids            []int32
	}{
		{50257, 20240520, 1, 2, []int32{50256, 0, 1, 65535 % 50257, 42}},
		{128256, 20240801, 7, 4, []int32{128000, 0, 70000, 5}},
	} {
		path := filepath.Join(dir, "s.bin")
		if err := WriteShard(path, tc.vocab, tc.ids); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var u []uint32
		for _, id := range tc.ids {
			u = append(u, uint32(id))
		}
		if want := llmcShard(tc.magic, tc.version, tc.width, u); !slices.Equal(got, want) {
			t.Fatalf("vocab %d: WriteShard wrote %d bytes differing from llm.c's layout (%d bytes)", tc.vocab, len(got), len(want))
		}
		tok, err := OpenShard(path)
		if err != nil {
			t.Fatal(err)
		}
		back := make([]int32, tok.Len())
		tok.CopyInto(back, 0)
		tok.Close()
		if !slices.Equal(back, tc.ids) || tok.Info().Width != tc.width {
			t.Fatalf("vocab %d: read back %v width %d, want %v width %d", tc.vocab, back, tok.Info().Width, tc.ids, tc.width)
		}
	}
}

func TestOpenShardRejectsBadFiles(t *testing.T) {
	dir := t.TempDir()
	good := llmcShard(20240520, 1, 2, []uint32{1, 2, 3})
	cases := map[string]struct {
		data []byte
		want string
	}{
		"short":     {good[:100], "shorter than the 1024-byte header"},
		"truncated": {good[:len(good)-1], "truncated or corrupt"},
		"long":      {append(slices.Clone(good), 0, 0), "truncated or corrupt"},
		"magic":     {llmcShard(12345, 1, 2, []uint32{1}), "not an llm.c token shard"},
		"version":   {llmcShard(20240520, 7, 2, []uint32{1}), "want version 1 for magic 20240520"},
		"negative":  {llmcShard(20240801, 7, 4, nil), ""},
	}
	neg := cases["negative"]
	binary.LittleEndian.PutUint32(neg.data[8:], uint32(0xffffffff))
	neg.want = "want a non-negative count"
	cases["negative"] = neg
	for name, tc := range cases {
		path := filepath.Join(dir, name+".bin")
		if err := os.WriteFile(path, tc.data, 0o644); err != nil {
			t.Fatal(err)
		}
		tok, err := OpenShard(path)
		if err == nil {
			tok.Close()
			t.Errorf("%s: OpenShard succeeded, want an error containing %q", name, tc.want)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), path) {
			t.Errorf("%s: error %q, want it to name %s and say %q", name, err, path, tc.want)
		}
	}
	if _, err := OpenShard(dir); err == nil || !strings.Contains(err.Error(), "want a regular file") {
		t.Errorf("OpenShard(dir) = %v, want a not-a-regular-file error", err)
	}
}

func TestWriteShardRejectsIDsOutsideVocabulary(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.bin")
	err := WriteShard(path, 100, []int32{1, 100})
	if err == nil || !strings.Contains(err.Error(), "id 100 at index 1") {
		t.Fatalf("WriteShard = %v, want an error naming id 100 at index 1", err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("a failed WriteShard left %s behind (stat: %v)", path, err)
	}
}

// writeShards writes shards of the given lengths with ids counting up from
// 0 across them, and returns their paths and all ids.
func writeShards(t *testing.T, dir, prefix string, vocab int, lengths ...int) ([]string, []int32) {
	t.Helper()
	var paths []string
	var all []int32
	for k, n := range lengths {
		ids := make([]int32, n)
		for i := range ids {
			ids[i] = int32((len(all) + i) % vocab)
		}
		all = append(all, ids...)
		p := filepath.Join(dir, prefix+"_"+string(rune('a'+k))+".bin")
		if err := WriteShard(p, vocab, ids); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	return paths, all
}

func TestOpenShardsConcatenatesAcrossBoundaries(t *testing.T) {
	dir := t.TempDir()
	paths, all := writeShards(t, dir, "train", 1000, 7, 1, 13, 5)
	tok, err := OpenShards(paths, 1000)
	if err != nil {
		t.Fatal(err)
	}
	defer tok.Close()
	if tok.Len() != len(all) || len(tok.Parts()) != 4 {
		t.Fatalf("Len %d with %d parts, want %d with 4", tok.Len(), len(tok.Parts()), len(all))
	}
	for i, want := range all {
		if got := tok.At(i); got != want {
			t.Fatalf("At(%d) = %d, want %d", i, got, want)
		}
	}
	for start := 0; start < len(all); start++ {
		for n := 0; start+n <= len(all); n++ {
			dst := make([]int32, n)
			tok.CopyInto(dst, start)
			if !slices.Equal(dst, all[start:start+n]) {
				t.Fatalf("CopyInto(len %d, %d) = %v, want %v", n, start, dst, all[start:start+n])
			}
		}
	}
	// A sampler draws windows that span shards like any other.
	s, err := NewSampler(tok.All(), 8, 1)
	if err != nil {
		t.Fatal(err)
	}
	x, y := make([]int32, 8*50), make([]int32, 8*50)
	s.Fill(x, y)
	for i := range x {
		if y[i] != x[i]+1 {
			t.Fatalf("window token %d: y = %d, want x+1 = %d", i, y[i], x[i]+1)
		}
	}
	if err := tok.Close(); err != nil {
		t.Fatal(err)
	}
	if err := tok.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

func TestOpenShardsChecksVocabulary(t *testing.T) {
	dir := t.TempDir()
	paths, _ := writeShards(t, dir, "s", 1000, 10, 600)
	_, err := OpenShards(paths, 500)
	if err == nil || !strings.Contains(err.Error(), paths[1]) || !strings.Contains(err.Error(), "token 500 at index 490") {
		t.Fatalf("OpenShards with vocabulary 500 = %v, want an error naming %s and token 500 at index 490", err, paths[1])
	}
}

func TestShardPaths(t *testing.T) {
	dir := t.TempDir()
	train, _ := writeShards(t, dir, "x_train", 100, 3, 3)
	val, _ := writeShards(t, dir, "x_val", 100, 3)
	if err := os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := ShardPaths(dir)
	if err != nil {
		t.Fatal(err)
	}
	if want := append(slices.Clone(train), val...); !slices.Equal(got, want) {
		t.Fatalf("ShardPaths(dir) = %v, want %v", got, want)
	}
	got, err = ShardPaths(filepath.Join(dir, "x_train_*.bin"))
	if err != nil || !slices.Equal(got, train) {
		t.Fatalf("ShardPaths(glob) = %v, %v, want %v", got, err, train)
	}
	if _, err := ShardPaths(filepath.Join(dir, "nothing_*.bin")); err == nil || !strings.Contains(err.Error(), "no files match") {
		t.Fatalf("ShardPaths(no match) = %v, want a no-files-match error", err)
	}
}
