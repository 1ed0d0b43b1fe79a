package data

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"sync"
)

// BPEDropout is GPT-2's byte-pair encoding with BPE-dropout (Provilkov et
// al. 2020): at every merge step of a pre-tokenizer piece, each applicable
// merge is dropped with probability P, and the lowest-ranked merge that
// survives is applied; when none survives, the piece is done. The same
// text thus comes out in varied, finer segmentations, a regularizer that
// makes models robust to how words are split. With P = 0 it is exactly
// GPT-2's encoding.
//
// Merges are tiktoken's: two adjacent parts merge when their concatenated
// bytes are a token, ranked by its id (GPT-2's ranks are its ids). Without
// dropout this equals merges.txt; with it, a part pair whose concatenation
// is a token formed through another pair may merge too, which yields a
// token of the vocabulary all the same.
//
// It is safe for concurrent use; randomness comes from the caller.
type BPEDropout struct {
	// P is the probability of dropping each merge, in [0, 1).
	P     float64
	ranks map[string]int32
	gpt2  *gpt2Tokenizer
}

// NewBPEDropout returns GPT-2's encoding with merges dropped at
// probability p. Building the rank table takes a few tens of milliseconds;
// keep one around.
func NewBPEDropout(p float64) (*BPEDropout, error) {
	if !(p >= 0 && p < 1) {
		return nil, fmt.Errorf("BPE-dropout probability %v, want a number in [0, 1)", p)
	}
	g := newGPT2()
	return &BPEDropout{P: p, ranks: g.rankEncoder().ranks, gpt2: g}, nil
}

// Tokenizer returns the GPT-2 tokenizer whose ids the encoding produces.
func (b *BPEDropout) Tokenizer() Tokenizer { return b.gpt2 }

// Encode appends the ids of text to ids, drawing the dropout decisions
// from rng (which may be nil when P is 0), and returns the extended slice.
// Like GPT-2's Encode it treats "<|endoftext|>" as ordinary text.
func (b *BPEDropout) Encode(ids []int32, text string, rng *rand.Rand) []int32 {
	var scratch bpeScratch
	for i := 0; i < len(text); {
		end := gpt2NextPiece(text, i)
		ids = b.encodePiece(ids, text[i:end], rng, &scratch)
		i = end
	}
	return ids
}

// bpeScratch is the memory one piece's merging reuses.
type bpeScratch struct {
	bounds []int   // part k is piece[bounds[k]:bounds[k+1]]
	ranks  []int32 // ranks[k]: rank of parts k and k+1 merged, or noMerge
}

// noMerge marks a part that cannot merge with the next.
const noMerge = math.MaxInt32

// encodePiece appends the ids of one pre-tokenizer piece.
func (b *BPEDropout) encodePiece(ids []int32, piece string, rng *rand.Rand, s *bpeScratch) []int32 {
	if b.P == 0 {
		if id, ok := b.ranks[piece]; ok {
			return append(ids, id)
		}
	}
	s.bounds = s.bounds[:0]
	for i := 0; i <= len(piece); i++ {
		s.bounds = append(s.bounds, i)
	}
	s.ranks = s.ranks[:0]
	for k := 0; k+1 < len(piece); k++ {
		s.ranks = append(s.ranks, b.pairRank(piece, s.bounds, k))
	}
	for len(s.ranks) > 0 {
		best, bestRank := -1, int32(noMerge)
		for k, r := range s.ranks {
			if r >= bestRank || (b.P > 0 && rng.Float64() < b.P) {
				continue
			}
			best, bestRank = k, r
		}
		if best < 0 {
			break
		}
		// Merge parts best and best+1: drop boundary best+1.
		s.bounds = append(s.bounds[:best+1], s.bounds[best+2:]...)
		s.ranks = append(s.ranks[:best], s.ranks[best+1:]...)
		if best < len(s.ranks) {
			s.ranks[best] = b.pairRank(piece, s.bounds, best)
		}
		if best > 0 {
			s.ranks[best-1] = b.pairRank(piece, s.bounds, best-1)
		}
	}
	for k := 0; k+1 < len(s.bounds); k++ {
		ids = append(ids, b.ranks[piece[s.bounds[k]:s.bounds[k+1]]])
	}
	return ids
}

// pairRank returns the rank of parts k and k+1 merged, or noMerge.
func (b *BPEDropout) pairRank(piece string, bounds []int, k int) int32 {
	if r, ok := b.ranks[piece[bounds[k]:bounds[k+2]]]; ok {
		return r
	}
	return noMerge
}

// EncodeBatch encodes texts on all CPUs, text i with its own random stream
// seeded by seeds[i] (ignored when P is 0), so the result does not depend
// on how the work is scheduled.
func (b *BPEDropout) EncodeBatch(texts []string, seeds []uint64) [][]int32 {
	out := make([][]int32, len(texts))
	var wg sync.WaitGroup
	next := make(chan int)
	for range min(runtime.GOMAXPROCS(0), len(texts)) {
		wg.Go(func() {
			for i := range next {
				var rng *rand.Rand
				if b.P > 0 {
					rng = rand.New(rand.NewPCG(seeds[i], samplerSeed2))
				}
				out[i] = b.Encode(nil, texts[i], rng)
			}
		})
	}
	for i := range texts {
		next <- i
	}
	close(next)
	wg.Wait()
	return out
}
