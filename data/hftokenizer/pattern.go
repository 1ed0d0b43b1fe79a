package hftokenizer

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/dlclark/regexp2/v2"
)

// pattern is what a Split pre-tokenizer or a Replace normalizer or decoder
// looks for: a literal string or a regular expression, given in
// tokenizer.json as {"String": "..."} or {"Regex": "..."}.
type pattern struct {
	literal string
	re      *regexp2.Regexp // nil for a literal
}

// parsePattern reads a pattern object of tokenizer.json.
func parsePattern(raw json.RawMessage) (pattern, error) {
	var p struct {
		String *string `json:"String"`
		Regex  *string `json:"Regex"`
	}
	if err := json.Unmarshal(raw, &p); err != nil {
		return pattern{}, fmt.Errorf("pattern %s: %w", raw, err)
	}
	switch {
	case p.String != nil && p.Regex == nil:
		if *p.String == "" {
			return pattern{}, fmt.Errorf("pattern %s: empty string", raw)
		}
		return pattern{literal: *p.String}, nil
	case p.Regex != nil && p.String == nil:
		re, err := compileOnig(*p.Regex)
		if err != nil {
			return pattern{}, err
		}
		return pattern{re: re}, nil
	}
	return pattern{}, fmt.Errorf("pattern %s: want {\"String\": ...} or {\"Regex\": ...}", raw)
}

// compileOnig compiles a regular expression written for Oniguruma (which
// tokenizers uses) with regexp2, whose .NET syntax shares the features
// tokenizer.json patterns use: \p{L} and \p{N} Unicode classes, \s as
// [\t-\r\x85\p{Z}], look-ahead and (?i:...) groups. Oniguruma's Ruby
// syntax makes ^ and $ match at line breaks, hence Multiline. The
// backtracking stack may grow as far as a text needs, so that no match
// fails on a long text (regexp2 bounds it by default).
func compileOnig(expr string) (*regexp2.Regexp, error) {
	re, err := regexp2.Compile(expr, regexp2.Multiline, regexp2.OptionMaxBacktrackingStackSize(-1))
	if err != nil {
		return nil, fmt.Errorf("regular expression %q: %w", expr, err)
	}
	return re, nil
}

// match is a span of text and whether the pattern matched it.
type match struct {
	start, end int
	matched    bool
}

// find returns text cut into the pattern's matches and the gaps between
// them, in order, as tokenizers' Pattern::find_matches does. regexp2 fails
// only on a time-out or a backtracking limit, neither of which
// compileOnig sets; were it to fail, the text would count as unmatched.
func (p pattern) find(text string) []match {
	if text == "" {
		return []match{{0, 0, false}}
	}
	var spans [][]int
	if p.re == nil {
		for i := 0; ; {
			j := strings.Index(text[i:], p.literal)
			if j < 0 {
				break
			}
			spans = append(spans, []int{i + j, i + j + len(p.literal)})
			i += j + len(p.literal)
		}
	} else {
		var err error
		if spans, err = p.re.FindAllStringIndex(text, -1); err != nil {
			spans = nil
		}
	}
	out := make([]match, 0, 2*len(spans)+1)
	prev := 0
	for _, s := range spans {
		if prev != s[0] {
			out = append(out, match{prev, s[0], false})
		}
		out = append(out, match{s[0], s[1], true})
		prev = s[1]
	}
	if prev != len(text) {
		out = append(out, match{prev, len(text), false})
	}
	return out
}

// replaceAll replaces every match of p in text with content.
func (p pattern) replaceAll(text, content string) string {
	if p.re == nil {
		return strings.ReplaceAll(text, p.literal, content)
	}
	var b strings.Builder
	for _, m := range p.find(text) {
		if m.matched {
			b.WriteString(content)
		} else {
			b.WriteString(text[m.start:m.end])
		}
	}
	return b.String()
}

// behavior is how a split treats the pattern's matches
// (SplitDelimiterBehavior).
type behavior int

const (
	removed behavior = iota
	isolated
	mergedWithPrevious
	mergedWithNext
	contiguous
)

// behaviors are the names tokenizer.json writes.
var behaviors = map[string]behavior{
	"Removed": removed, "Isolated": isolated, "MergedWithPrevious": mergedWithPrevious,
	"MergedWithNext": mergedWithNext, "Contiguous": contiguous,
}

// span is a piece of a split text: its bounds, and whether it is dropped.
type span struct {
	start, end int
	drop       bool
}

// apply groups the matches into the pieces the behavior makes, as
// tokenizers' NormalizedString::split does.
func (b behavior) apply(ms []match) []span {
	var out []span
	switch b {
	case removed:
		for _, m := range ms {
			out = append(out, span{m.start, m.end, m.matched})
		}
	case isolated:
		for _, m := range ms {
			out = append(out, span{m.start, m.end, false})
		}
	case mergedWithPrevious:
		prevMatch := false
		for _, m := range ms {
			if m.matched && !prevMatch && len(out) > 0 {
				out[len(out)-1].end = m.end
			} else {
				out = append(out, span{m.start, m.end, false})
			}
			prevMatch = m.matched
		}
	case mergedWithNext:
		prevMatch := false
		for i := len(ms) - 1; i >= 0; i-- {
			m := ms[i]
			if m.matched && !prevMatch && len(out) > 0 {
				out[len(out)-1].start = m.start
			} else {
				out = append(out, span{m.start, m.end, false})
			}
			prevMatch = m.matched
		}
		for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
			out[i], out[j] = out[j], out[i]
		}
	case contiguous:
		prevMatch := false
		for _, m := range ms {
			if m.matched == prevMatch && len(out) > 0 {
				out[len(out)-1].end = m.end
			} else {
				out = append(out, span{m.start, m.end, false})
			}
			prevMatch = m.matched
		}
	}
	return out
}
