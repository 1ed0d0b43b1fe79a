package data

import (
	"errors"
	"io/fs"
	"os"
	"testing"
)

// tinyShakespeare is the shared 1.1 MB benchmark text, relative to this
// package's directory in a checkout with shared data beside it.
const tinyShakespeare = "../../shared/data/tinyshakespeare.txt"

func BenchmarkEncodeGPT2(b *testing.B) {
	text, err := os.ReadFile(tinyShakespeare)
	if errors.Is(err, fs.ErrNotExist) {
		b.Skipf("%s not present", tinyShakespeare)
	}
	if err != nil {
		b.Fatal(err)
	}
	tok, err := NewTokenizer("gpt2")
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(text)))
	var n int
	for b.Loop() {
		n = len(tok.Encode(string(text)))
	}
	b.ReportMetric(float64(n), "tokens")
}

func BenchmarkEncodeDefaultCorpusGPT2(b *testing.B) {
	c, err := LoadDefaultCorpus()
	if err != nil {
		b.Fatal(err)
	}
	tok, err := NewTokenizer("gpt2")
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(c.Bytes)
	var n int
	for b.Loop() {
		n = 0
		err := EncodeCorpus(c, tok, func(ids []int32) error {
			n += len(ids)
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(n), "tokens")
}

func BenchmarkSamplerFill(b *testing.B) {
	s, err := NewSampler(NewTokens(seq(1<<20)).All(), 1024, 1)
	if err != nil {
		b.Fatal(err)
	}
	x, y := make([]int32, 16*1024), make([]int32, 16*1024)
	b.SetBytes(int64(8 * len(x)))
	for b.Loop() {
		s.Fill(x, y)
	}
}
