package data

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// trickyText returns n pieces of text chosen to stress GPT-2's pre-tokenizer
// around newlines: whitespace runs, Unicode spaces, contractions, digits,
// punctuation and multi-byte characters.
func trickyText(seed uint64, n int) string {
	pieces := []string{
		"\n", "\n", "\n\n", "\n \n", " ", "  ", "\t", "\r\n", "word", " word",
		"Word", "123", " 45", "'s", "'ll", "!!", " ?", "é", "世界", "\u00a0",
		"\u2028", "\u0085", "🙂", "x", "\n\t", "}\n", "\nfunc", ".\n",
	}
	r := rand.New(rand.NewPCG(seed, 1))
	var b strings.Builder
	for range n {
		b.WriteString(pieces[r.IntN(len(pieces))])
	}
	return b.String()
}

func TestSplitForEncodingPreservesIDs(t *testing.T) {
	g := newGPT2()
	for seed := range uint64(4) {
		text := trickyText(seed, 4000)
		want := g.codecEncode(text)
		for _, minBytes := range []int{1, 5, 64, 1000} {
			chunks := splitForEncoding(text, minBytes)
			if strings.Join(chunks, "") != text {
				t.Fatalf("seed %d minBytes %d: chunks do not concatenate to the text", seed, minBytes)
			}
			if minBytes <= 64 && len(chunks) < 10 {
				t.Errorf("seed %d minBytes %d: only %d chunks of a %d-byte text", seed, minBytes, len(chunks), len(text))
			}
			var got []int32
			for i, c := range chunks {
				if i < len(chunks)-1 && len(c) < minBytes {
					t.Errorf("chunk %d has %d bytes, want at least %d", i, len(c), minBytes)
				}
				got = append(got, g.encodeChunk(c)...)
			}
			if !slices.Equal(got, want) {
				t.Errorf("seed %d minBytes %d: chunked encoding differs from whole-text encoding", seed, minBytes)
			}
		}
	}
}

func TestSplitForEncodingShortText(t *testing.T) {
	if got := splitForEncoding("a\nb\nc\n", 4); len(got) != 1 {
		t.Errorf("splitForEncoding of a 6-byte text with minBytes 4 = %q, want one chunk", got)
	}
	if got := splitForEncoding("a\n\n\nb c d e f g h", 2); len(got) != 1 {
		t.Errorf("text without a lone newline was cut: %q", got)
	}
}

func TestGPT2EncodeParallelMatchesSerial(t *testing.T) {
	g := newGPT2()
	text := trickyText(9, 60000) // several gpt2ChunkBytes
	if len(splitForEncoding(text, gpt2ChunkBytes)) < 2 {
		t.Fatalf("a %d-byte text did not split; the test would not exercise the parallel path", len(text))
	}
	if !slices.Equal(g.Encode(text), g.encodeChunk(text)) {
		t.Error("parallel Encode differs from single-call encoding")
	}
}
