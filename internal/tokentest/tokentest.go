// Package tokentest provides a small data.SpecialTokenizer for tests of
// code that encodes chat templates and prompts with special tokens, where
// a real tokenizer.json would hide what is being tested behind merges.
package tokentest

import (
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/posttrainllm/posttrainllm/data"
)

// Bytes is the byte tokenizer (id i is byte i) with special tokens: the
// i-th special text given to NewBytes is id 256+i. Encode writes special
// texts as their bytes; EncodeSpecial matches them, longest first, as
// their ids. Its EOT is the special token named eot.
type Bytes struct {
	specials []string
	ids      map[string]int32
	eot      int32
}

// NewBytes returns a Bytes tokenizer with the given special tokens, whose
// end-of-text token is eot (one of them).
func NewBytes(eot string, specials ...string) *Bytes {
	b := &Bytes{specials: specials, ids: map[string]int32{}}
	for i, s := range specials {
		b.ids[s] = int32(256 + i)
	}
	b.eot = b.ids[eot]
	return b
}

var _ data.SpecialTokenizer = (*Bytes)(nil)

// Name is "bytes+specials".
func (b *Bytes) Name() string { return "bytes+specials" }

// VocabSize is 256 plus the special tokens.
func (b *Bytes) VocabSize() int { return 256 + len(b.specials) }

// EOT is the id of the end-of-text special token.
func (b *Bytes) EOT() int32 { return b.eot }

// Encode returns the bytes of text.
func (b *Bytes) Encode(text string) []int32 {
	ids := make([]int32, len(text))
	for i := 0; i < len(text); i++ {
		ids[i] = int32(text[i])
	}
	return ids
}

// EncodeSpecial returns the ids of text with special tokens matched,
// longest first where two start at one place.
func (b *Bytes) EncodeSpecial(text string) []int32 {
	byLen := append([]string(nil), b.specials...)
	sort.Slice(byLen, func(i, j int) bool { return len(byLen[i]) > len(byLen[j]) })
	var ids []int32
	for i := 0; i < len(text); {
		matched := false
		for _, s := range byLen {
			if s != "" && strings.HasPrefix(text[i:], s) {
				ids = append(ids, b.ids[s])
				i += len(s)
				matched = true
				break
			}
		}
		if !matched {
			ids = append(ids, int32(text[i]))
			i++
		}
	}
	return ids
}

// SpecialTokens maps each special token's text to its id.
func (b *Bytes) SpecialTokens() map[string]int32 {
	out := make(map[string]int32, len(b.ids))
	for s, id := range b.ids {
		out[s] = id
	}
	return out
}

// Decode returns the text of ids, special tokens as their text; ids
// outside the vocabulary decode to U+FFFD.
func (b *Bytes) Decode(ids []int32) string {
	var out []byte
	for _, id := range ids {
		switch {
		case id >= 0 && id < 256:
			out = append(out, byte(id))
		case id >= 256 && int(id) < 256+len(b.specials):
			out = append(out, b.specials[id-256]...)
		default:
			out = utf8.AppendRune(out, utf8.RuneError)
		}
	}
	return string(out)
}
