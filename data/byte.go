package data

import "strings"

const byteTokenizerName = "byte"

// byteTokenizer encodes text as its UTF-8 bytes: id i is byte i, so the
// vocabulary has 256 ids and every string, valid UTF-8 or not, round-trips.
//
// Its EOT is 0, the NUL byte. LoadCorpus skips files that contain NUL, so
// 0 never occurs inside a corpus document and marks document boundaries
// unambiguously.
type byteTokenizer struct{}

// Name returns "byte".
func (byteTokenizer) Name() string { return byteTokenizerName }

// VocabSize returns 256.
func (byteTokenizer) VocabSize() int { return 256 }

// EOT returns 0, the NUL byte.
func (byteTokenizer) EOT() int32 { return 0 }

// Encode returns the bytes of text as ids.
func (byteTokenizer) Encode(text string) []int32 {
	ids := make([]int32, len(text))
	for i := 0; i < len(text); i++ {
		ids[i] = int32(text[i])
	}
	return ids
}

// Decode returns the bytes named by ids as a string; ids outside [0, 256)
// become U+FFFD.
func (byteTokenizer) Decode(ids []int32) string {
	var b strings.Builder
	b.Grow(len(ids))
	for _, id := range ids {
		if id < 0 || id > 255 {
			b.WriteString("\uFFFD")
			continue
		}
		b.WriteByte(byte(id))
	}
	return b.String()
}
