package data

import (
	"fmt"
	"path/filepath"
	"testing"
)

// BenchmarkSamplerFillShards is BenchmarkSamplerFill over the same tokens
// in four memory-mapped uint16 shards instead of one in-memory slice: the
// cost of the shard lookup per window.
func BenchmarkSamplerFillShards(b *testing.B) {
	dir := b.TempDir()
	ids := seq(1 << 20)
	for i := range ids {
		ids[i] %= 50257
	}
	var paths []string
	for k := range 4 {
		p := filepath.Join(dir, fmt.Sprintf("s_train_%06d.bin", k))
		if err := WriteShard(p, 50257, ids[k<<18:(k+1)<<18]); err != nil {
			b.Fatal(err)
		}
		paths = append(paths, p)
	}
	tok, err := OpenShards(paths, 50257)
	if err != nil {
		b.Fatal(err)
	}
	defer tok.Close()
	s, err := NewSampler(tok.All(), 1024, 1)
	if err != nil {
		b.Fatal(err)
	}
	x, y := make([]int32, 16*1024), make([]int32, 16*1024)
	b.SetBytes(int64(8 * len(x)))
	for b.Loop() {
		s.Fill(x, y)
	}
}

// BenchmarkSamplerFillBPEDropout fills a batch of 16 windows of 1024 GPT-2
// tokens of Go sources, re-tokenised with BPE-dropout at p = 0.1 on all
// CPUs: the host time dropout adds to each batch.
func BenchmarkSamplerFillBPEDropout(b *testing.B) {
	c, err := LoadDefaultCorpus()
	if err != nil {
		b.Fatal(err)
	}
	g := newGPT2()
	var ids []int32
	err = EncodeCorpus(c, g, func(part []int32) error {
		ids = append(ids, part...)
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	bd, err := NewBPEDropout(0.1)
	if err != nil {
		b.Fatal(err)
	}
	s, err := NewSampler(NewTokens(ids).All(), 1024, 1)
	if err != nil {
		b.Fatal(err)
	}
	s.SetBPEDropout(bd)
	x, y := make([]int32, 16*1024), make([]int32, 16*1024)
	b.SetBytes(int64(4 * len(x)))
	for b.Loop() {
		s.Fill(x, y)
	}
}
