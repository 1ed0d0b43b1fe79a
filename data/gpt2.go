package data

import (
	"fmt"
	"runtime"
	"strings"
	"sync"

	"github.com/tiktoken-go/tokenizer/codec"
)

const (
	gpt2TokenizerName = "gpt2"
	// gpt2EOT is GPT-2's <|endoftext|> id, the last id of its vocabulary.
	gpt2EOT = 50256
	// gpt2EOTText is how Decode renders gpt2EOT.
	gpt2EOTText = "<|endoftext|>"
	// gpt2ChunkBytes is the size from which Encode cuts text into chunks
	// that it encodes in parallel (see splitForEncoding).
	gpt2ChunkBytes = 64 << 10
)

// gpt2Tokenizer is OpenAI's GPT-2 byte-pair encoding (tiktoken's
// "r50k_base"): 50257 ids, of which 50256 is <|endoftext|>.
//
// The merge ranks are compiled into the binary by
// github.com/tiktoken-go/tokenizer, so it needs no network or files.
type gpt2Tokenizer struct {
	codec *codec.Codec

	decodeOnce  sync.Once
	decodeTable []string // id -> bytes of that token, for ids below gpt2EOT

	ranksOnce sync.Once
	ranks     *BPEDropout // the rank table, merging without dropout
}

// newGPT2 returns a GPT-2 tokenizer. Building the rank table takes a few
// milliseconds, so callers keep one tokenizer around.
func newGPT2() *gpt2Tokenizer {
	return &gpt2Tokenizer{codec: codec.NewR50kBase()}
}

// Name returns "gpt2".
func (*gpt2Tokenizer) Name() string { return gpt2TokenizerName }

// VocabSize returns 50257.
func (*gpt2Tokenizer) VocabSize() int { return gpt2EOT + 1 }

// EOT returns 50256, <|endoftext|>.
func (*gpt2Tokenizer) EOT() int32 { return gpt2EOT }

// Encode returns the GPT-2 ids of text, treating "<|endoftext|>" in text as
// ordinary characters. Texts of more than a few chunks are cut at newlines
// where cutting cannot change the result and encoded on all CPUs.
func (g *gpt2Tokenizer) Encode(text string) []int32 {
	chunks := splitForEncoding(text, gpt2ChunkBytes)
	if len(chunks) == 1 {
		return g.encodeChunk(text)
	}
	results := make([][]int32, len(chunks))
	workers := min(runtime.GOMAXPROCS(0), len(chunks))
	var (
		wg   sync.WaitGroup
		next = make(chan int)
	)
	for range workers {
		wg.Go(func() {
			for i := range next {
				results[i] = g.encodeChunk(chunks[i])
			}
		})
	}
	for i := range chunks {
		next <- i
	}
	close(next)
	wg.Wait()
	n := 0
	for _, r := range results {
		n += len(r)
	}
	ids := make([]int32, 0, n)
	for _, r := range results {
		ids = append(ids, r...)
	}
	return ids
}

// EncodeSpecial returns the GPT-2 ids of text with every "<|endoftext|>"
// written in it as EOT, as Hugging Face's tokenizers encodes GPT-2's
// special token by default, and the text between as Encode does: for
// prompts that spell out the separator.
func (g *gpt2Tokenizer) EncodeSpecial(text string) []int32 {
	var ids []int32
	for {
		i := strings.Index(text, gpt2EOTText)
		if i < 0 {
			break
		}
		ids = append(ids, g.Encode(text[:i])...)
		ids = append(ids, gpt2EOT)
		text = text[i+len(gpt2EOTText):]
	}
	return append(ids, g.Encode(text)...)
}

// SpecialTokens maps "<|endoftext|>", GPT-2's one special token, to EOT.
func (*gpt2Tokenizer) SpecialTokens() map[string]int32 {
	return map[string]int32{gpt2EOTText: gpt2EOT}
}

// encodeChunk encodes text with the hand-written GPT-2 pre-tokenizer and
// the codec's merge ranks: the codec's ids (tests compare them), about four
// times as fast as its regular-expression engine (docs/techniques.md).
func (g *gpt2Tokenizer) encodeChunk(text string) []int32 {
	return g.rankEncoder().Encode(make([]int32, 0, len(text)/3+1), text, nil)
}

// rankEncoder returns the BPE over the codec's ranks, built on first use.
func (g *gpt2Tokenizer) rankEncoder() *BPEDropout {
	g.ranksOnce.Do(func() {
		g.decodeOnce.Do(g.buildDecodeTable)
		ranks := make(map[string]int32, len(g.decodeTable))
		for id, s := range g.decodeTable {
			ranks[s] = int32(id)
		}
		g.ranks = &BPEDropout{ranks: ranks, gpt2: g}
	})
	return g.ranks
}

// Decode returns the text of ids. EOT becomes "<|endoftext|>" and ids
// outside the vocabulary become U+FFFD. Tokens are byte sequences, so the
// result is valid UTF-8 only when ids end on a character boundary.
func (g *gpt2Tokenizer) Decode(ids []int32) string {
	g.decodeOnce.Do(g.buildDecodeTable)
	var b strings.Builder
	for _, id := range ids {
		switch {
		case id == gpt2EOT:
			b.WriteString(gpt2EOTText)
		case id < 0 || int(id) >= len(g.decodeTable):
			b.WriteString("\uFFFD")
		default:
			b.WriteString(g.decodeTable[id])
		}
	}
	return b.String()
}

// buildDecodeTable fills decodeTable from the codec, one id at a time.
func (g *gpt2Tokenizer) buildDecodeTable() {
	table := make([]string, gpt2EOT)
	one := make([]uint, 1)
	for id := range table {
		one[0] = uint(id)
		s, err := g.codec.Decode(one)
		if err != nil {
			panic(fmt.Sprintf("data: gpt2 codec cannot decode id %d: %v", id, err))
		}
		table[id] = s
	}
	g.decodeTable = table
}
