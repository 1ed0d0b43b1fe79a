package data

import (
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// dropoutView returns GPT-2 tokens of a few Go sources joined by
// <|endoftext|>, and their text with "\x00" marking document ends.
func dropoutView(t *testing.T) (View, string) {
	t.Helper()
	g := newGPT2()
	var ids []int32
	var text strings.Builder
	for _, name := range []string{"print.go", "scan.go", "format.go"} {
		src, err := os.ReadFile(filepath.Join(runtime.GOROOT(), "src", "fmt", name))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, g.Encode(string(src))...)
		ids = append(ids, g.EOT())
		text.Write(src)
		text.WriteByte(0)
	}
	return NewTokens(ids).All(), text.String()
}

func TestSamplerBPEDropoutWindows(t *testing.T) {
	view, text := dropoutView(t)
	b, err := NewBPEDropout(0.1)
	if err != nil {
		t.Fatal(err)
	}
	g := b.gpt2
	const T, windows = 64, 40
	s, err := NewSampler(view, T, 3)
	if err != nil {
		t.Fatal(err)
	}
	s.SetBPEDropout(b)
	x, y := make([]int32, T*windows), make([]int32, T*windows)
	s.Fill(x, y)
	plain, err := NewSampler(view, T, 3)
	if err != nil {
		t.Fatal(err)
	}
	px, py := make([]int32, T*windows), make([]int32, T*windows)
	plain.Fill(px, py)
	bytesDropout, bytesPlain := 0, 0
	for k := range windows {
		wx, wy := x[k*T:(k+1)*T], y[k*T:(k+1)*T]
		if !slices.Equal(wx[1:], wy[:T-1]) {
			t.Fatalf("window %d: y is not x shifted by one token", k)
		}
		// Every window is a stretch of the corpus: its documents' text,
		// with <|endoftext|> where documents end.
		var seg []int32
		for _, id := range append(slices.Clone(wx), wy[T-1]) {
			if id == g.EOT() {
				if !strings.Contains(text, g.Decode(seg)+"\x00") {
					t.Fatalf("window %d: %q before <|endoftext|> is not the end of a document", k, g.Decode(seg))
				}
				seg = seg[:0]
				continue
			}
			seg = append(seg, id)
		}
		if !strings.Contains(text, g.Decode(seg)) {
			t.Fatalf("window %d: %q is not in the corpus", k, g.Decode(seg))
		}
		bytesDropout += len(g.Decode(wx))
		bytesPlain += len(g.Decode(px[k*T : (k+1)*T]))
	}
	// Finer segmentations: the same number of tokens covers less text.
	if !(bytesDropout < bytesPlain) {
		t.Fatalf("windows of %d tokens cover %d bytes with dropout, %d without; want fewer with dropout", T, bytesDropout, bytesPlain)
	}
}

func TestSamplerBPEDropoutResumes(t *testing.T) {
	view, _ := dropoutView(t)
	b, err := NewBPEDropout(0.2)
	if err != nil {
		t.Fatal(err)
	}
	const T, windows = 32, 8
	draw := func(s *Sampler) []int32 {
		x, y := make([]int32, T*windows), make([]int32, T*windows)
		s.Fill(x, y)
		return append(x, y...)
	}
	a, _ := NewSampler(view, T, 9)
	a.SetBPEDropout(b)
	draw(a)
	state, err := a.State()
	if err != nil {
		t.Fatal(err)
	}
	want := [][]int32{draw(a), draw(a)}
	r, _ := NewSampler(view, T, 123)
	r.SetBPEDropout(b)
	if err := r.SetState(state); err != nil {
		t.Fatal(err)
	}
	for i, w := range want {
		if got := draw(r); !slices.Equal(got, w) {
			t.Fatalf("batch %d after restoring the state differs from the batch drawn without interruption", i+1)
		}
	}
}

// With BPE-dropout, two ranks' shards still hold the rows of the doubled
// batch, each re-encoded as the single process re-encodes it.
func TestSamplerBPEDropoutShards(t *testing.T) {
	view, _ := dropoutView(t)
	b, err := NewBPEDropout(0.1)
	if err != nil {
		t.Fatal(err)
	}
	const T, rows, ranks = 32, 3, 2
	whole, _ := NewSampler(view, T, 5)
	whole.SetBPEDropout(b)
	wx, wy := make([]int32, T*rows*ranks), make([]int32, T*rows*ranks)
	whole.Fill(wx, wy)
	for r := range ranks {
		s, _ := NewSampler(view, T, 5)
		s.SetBPEDropout(b)
		if err := s.Shard(r, ranks, rows); err != nil {
			t.Fatal(err)
		}
		x, y := make([]int32, T*rows), make([]int32, T*rows)
		s.Fill(x, y)
		lo, hi := r*rows*T, (r+1)*rows*T
		if !slices.Equal(x, wx[lo:hi]) || !slices.Equal(y, wy[lo:hi]) {
			t.Fatalf("rank %d: its windows differ from rows %d…%d of the doubled batch", r, r*rows, (r+1)*rows-1)
		}
		ws, _ := whole.State()
		rs, _ := s.State()
		if !slices.Equal(rs, ws) {
			t.Fatalf("rank %d: sampler state differs from the single process's", r)
		}
	}
}
