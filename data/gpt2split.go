package data

import (
	"unicode"
	"unicode/utf8"
)

// gpt2NextPiece returns the end of the GPT-2 pre-tokenizer piece that
// starts at text[i:], i < len(text): the match of
//
//	's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//
// at i, alternatives tried in order as a backtracking engine does. It is
// the hand-written equivalent of the regular expression that
// github.com/tiktoken-go/tokenizer runs (tests compare the two on varied
// text), and several times faster.
func gpt2NextPiece(text string, i int) int {
	if text[i] == '\'' {
		if n := contraction(text[i+1:]); n > 0 {
			return i + 1 + n
		}
	}
	r, size := utf8.DecodeRuneInString(text[i:])
	j := i
	if r == ' ' && i+size < len(text) {
		// " ?X+": the optional space joins a following letter, number or
		// other character.
		next, _ := utf8.DecodeRuneInString(text[i+size:])
		if class := runeClass(next); class != classSpace {
			return runEnd(text, i+size, class)
		}
	}
	if class := runeClass(r); class != classSpace {
		return runEnd(text, j, class)
	}
	// \s+(?!\S) and then \s+: a whitespace run, less its last character
	// when a non-space follows and the run has more than one.
	end := runEnd(text, i, classSpace)
	if end == len(text) {
		return end
	}
	_, last := utf8.DecodeLastRuneInString(text[i:end])
	if end-last > i {
		return end - last
	}
	return end
}

// GPT2PieceEnd returns the end of the piece of GPT-2's pre-tokenizer
// pattern (see gpt2NextPiece) that starts at text[i:], i < len(text): the
// split that Hugging Face's ByteLevel pre-tokenizer makes with its regular
// expression, which data/hftokenizer takes from here so that one
// hand-written matcher serves both tokenizers.
func GPT2PieceEnd(text string, i int) int { return gpt2NextPiece(text, i) }

// contraction returns the length of the contraction suffix ('s, 't, 're,
// 've, 'm, 'll, 'd, case-sensitive) at the start of s, after the
// apostrophe, or 0.
func contraction(s string) int {
	if len(s) == 0 {
		return 0
	}
	switch s[0] {
	case 's', 't', 'm', 'd':
		return 1
	}
	if len(s) >= 2 {
		switch s[:2] {
		case "re", "ve", "ll":
			return 2
		}
	}
	return 0
}

// Character classes of the GPT-2 pattern.
const (
	classLetter = iota // \p{L}
	classNumber        // \p{N}
	classOther         // [^\s\p{L}\p{N}]
	classSpace         // \s
)

// runeClass returns the pattern's class of r.
func runeClass(r rune) int {
	switch {
	case r < utf8.RuneSelf:
		c := byte(r)
		switch {
		case 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z':
			return classLetter
		case '0' <= c && c <= '9':
			return classNumber
		case c == ' ' || '\t' <= c && c <= '\r':
			return classSpace
		}
		return classOther
	case unicode.IsLetter(r):
		return classLetter
	case unicode.IsNumber(r):
		return classNumber
	case isPatternSpace(r):
		return classSpace
	}
	return classOther
}

// isPatternSpace reports whether the pattern's \s matches r, a non-ASCII
// rune: U+0085 and the Unicode separators (\p{Z}).
func isPatternSpace(r rune) bool {
	return r == 0x85 || unicode.Is(unicode.Z, r)
}

// runEnd returns the end of the run of characters of class class that
// starts at text[i:].
func runEnd(text string, i, class int) int {
	for i < len(text) {
		r, size := utf8.DecodeRuneInString(text[i:])
		if runeClass(r) != class {
			break
		}
		i += size
	}
	return i
}
