package data

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// splitForEncoding cuts text into chunks of at least minBytes bytes (the last
// may be shorter) such that encoding each chunk with GPT-2's pre-tokenizer
// and concatenating the ids gives exactly the ids of the whole text.
//
// GPT-2 first splits text with the pattern
//
//	's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//
// and encodes each piece on its own. A cut at position p is safe when a
// piece boundary falls there and no piece before p looks past p. Both hold
// when text[p-1] is a lone '\n' between two non-space characters: no
// alternative can join '\n' to the non-space character before it, the
// whitespace run is just "\n", which is one piece both in the whole text
// and at the end of a chunk, and the only lookahead, (?!\S), then looks at
// the '\n' itself. The pattern has no lookbehind, so matching restarts at
// p exactly as it would have continued.
func splitForEncoding(text string, minBytes int) []string {
	if minBytes <= 0 || len(text) < 2*minBytes {
		return []string{text}
	}
	var chunks []string
	start := 0
	for len(text)-start >= 2*minBytes {
		p := nextSafeCut(text, start+minBytes)
		if p < 0 || len(text)-p < minBytes {
			break
		}
		chunks = append(chunks, text[start:p])
		start = p
	}
	return append(chunks, text[start:])
}

// nextSafeCut returns the first safe cut position at or after from, or -1.
func nextSafeCut(text string, from int) int {
	for from < len(text) {
		i := strings.IndexByte(text[from:], '\n')
		if i < 0 {
			return -1
		}
		nl := from + i
		p := nl + 1
		if nl > 0 && p < len(text) {
			before, _ := utf8.DecodeLastRuneInString(text[:nl])
			after, _ := utf8.DecodeRuneInString(text[p:])
			if solid(before) && solid(after) {
				return p
			}
		}
		from = p
	}
	return -1
}

// solid reports whether r is a character that GPT-2's pattern never counts
// as whitespace (\s): not Unicode white space or a separator, and not an
// invalid byte, whose meaning to the pattern engine we do not rely on.
func solid(r rune) bool {
	return r != utf8.RuneError && !unicode.IsSpace(r) && !unicode.Is(unicode.Z, r)
}
