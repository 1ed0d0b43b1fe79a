package hftokenizer

import (
	"encoding/json"
	"fmt"
	"sort"
	"unicode"
	"unicode/utf8"
)

// addedToken is an entry of tokenizer.json's added_tokens: a string that
// is matched in text before normalization and pre-tokenization and becomes
// its id whole.
type addedToken struct {
	ID         int    `json:"id"`
	Content    string `json:"content"`
	SingleWord bool   `json:"single_word"`
	LStrip     bool   `json:"lstrip"`
	RStrip     bool   `json:"rstrip"`
	Normalized bool   `json:"normalized"`
	Special    bool   `json:"special"`
}

// parseAddedTokens reads added_tokens.
func parseAddedTokens(raw json.RawMessage) ([]addedToken, error) {
	if isNull(raw) {
		return nil, nil
	}
	var added []addedToken
	if err := json.Unmarshal(raw, &added); err != nil {
		return nil, fmt.Errorf("added_tokens: %w", err)
	}
	for _, a := range added {
		if a.Content == "" || a.ID < 0 {
			return nil, fmt.Errorf("added_tokens: token %q with id %d, want non-empty content and an id >= 0", a.Content, a.ID)
		}
	}
	return added, nil
}

// matcher finds added tokens in text the way tokenizers' AddedVocabulary
// does: leftmost-longest matches (its Aho-Corasick automaton's
// LeftmostLongest), then single_word, lstrip and rstrip applied to each.
// Tokens with normalized set are matched in normalized text, the others
// in the input; one matcher holds one of the two sets.
type matcher struct {
	// byFirst lists the tokens by their first byte, longest first.
	byFirst [256][]*addedToken
	any     bool
}

// newMatcher returns the matcher of the tokens for which keep is true.
func newMatcher(added []addedToken, keep func(addedToken) bool) *matcher {
	m := &matcher{}
	for i := range added {
		a := &added[i]
		if keep(*a) {
			m.byFirst[a.Content[0]] = append(m.byFirst[a.Content[0]], a)
			m.any = true
		}
	}
	for _, l := range m.byFirst {
		sort.SliceStable(l, func(i, j int) bool { return len(l[i].Content) > len(l[j].Content) })
	}
	return m
}

// segment is a span of text and the added token it is, or nil for text to
// be tokenized.
type segment struct {
	start, end int
	token      *addedToken
}

// split cuts text into added tokens and the text between them, as
// AddedVocabulary::find_matches does. Special tokens are skipped (left as
// text) unless specials is set, as tokenizers' encode_special_tokens does.
func (m *matcher) split(text string, specials bool) []segment {
	if !m.any {
		return []segment{{0, len(text), nil}}
	}
	var out []segment
	from := 0 // end of the last token kept
	for i := 0; i < len(text); {
		a := m.longestAt(text, i)
		if a == nil {
			i++
			continue
		}
		start, stop := i, i+len(a.Content)
		i = stop
		if a.Special && !specials {
			continue
		}
		if a.SingleWord && (start > 0 && endsWithWord(text[:start]) || stop < len(text) && startsWithWord(text[stop:])) {
			continue
		}
		if a.LStrip {
			start = max(trailingSpaceStart(text[:start]), from)
		}
		if a.RStrip {
			stop += leadingSpaceLen(text[stop:])
		}
		if from < start {
			out = append(out, segment{from, start, nil})
		}
		out = append(out, segment{start, stop, a})
		from = stop
	}
	if from < len(text) {
		out = append(out, segment{from, len(text), nil})
	}
	return out
}

// longestAt returns the longest token that text[i:] starts with, or nil.
func (m *matcher) longestAt(text string, i int) *addedToken {
	for _, a := range m.byFirst[text[i]] {
		if len(text)-i >= len(a.Content) && text[i:i+len(a.Content)] == a.Content {
			return a
		}
	}
	return nil
}

// isWord is the \w of Rust's regex crate, which tokenizers' single_word
// tests with: letters, marks, decimal digits and connector punctuation.
func isWord(r rune) bool {
	return unicode.IsLetter(r) || unicode.IsMark(r) || unicode.Is(unicode.Nd, r) || unicode.Is(unicode.Pc, r) || r == 0x200C || r == 0x200D
}

func endsWithWord(s string) bool {
	r, _ := utf8.DecodeLastRuneInString(s)
	return isWord(r)
}

func startsWithWord(s string) bool {
	r, _ := utf8.DecodeRuneInString(s)
	return isWord(r)
}

// trailingSpaceStart returns where the run of white space that ends s
// begins (len(s) without one).
func trailingSpaceStart(s string) int {
	for len(s) > 0 {
		r, size := utf8.DecodeLastRuneInString(s)
		if !unicode.IsSpace(r) {
			break
		}
		s = s[:len(s)-size]
	}
	return len(s)
}

// leadingSpaceLen returns the length of the run of white space that
// starts s.
func leadingSpaceLen(s string) int {
	n := 0
	for n < len(s) {
		r, size := utf8.DecodeRuneInString(s[n:])
		if !unicode.IsSpace(r) {
			break
		}
		n += size
	}
	return n
}
