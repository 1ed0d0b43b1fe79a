package hftokenizer

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/posttrainllm/posttrainllm/data"
)

// gpt2PieceEnd is the hand-written GPT-2 pattern matcher of package data,
// which ByteLevel's built-in regular expression is.
var gpt2PieceEnd = data.GPT2PieceEnd

// piece is one pre-tokenized piece of text. atStart is set when it begins
// at the start of the input, as Metaspace's "first" prepend scheme asks
// (tokenizers checks that the piece's original offset is 0).
type piece struct {
	text    string
	atStart bool
}

// preTokenizer cuts pieces into smaller ones (and may rewrite them, as
// ByteLevel and Metaspace do); BPE never merges across pieces.
type preTokenizer interface {
	preTokenize(pieces []piece) []piece
}

// parsePreTokenizer reads the pre_tokenizer of tokenizer.json; null is
// none (nil).
func parsePreTokenizer(raw json.RawMessage) (preTokenizer, error) {
	if isNull(raw) {
		return nil, nil
	}
	var head struct {
		Type string `json:"type"`
	}
	if err := json.Unmarshal(raw, &head); err != nil {
		return nil, fmt.Errorf("pre_tokenizer %s: %w", raw, err)
	}
	switch head.Type {
	case "Sequence":
		var s struct {
			PreTokenizers []json.RawMessage `json:"pretokenizers"`
		}
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, fmt.Errorf("pre_tokenizer Sequence: %w", err)
		}
		var seq sequencePreTokenizer
		for _, r := range s.PreTokenizers {
			p, err := parsePreTokenizer(r)
			if err != nil {
				return nil, err
			}
			if p != nil {
				seq = append(seq, p)
			}
		}
		return seq, nil
	case "ByteLevel":
		b := struct {
			AddPrefixSpace bool  `json:"add_prefix_space"`
			UseRegex       *bool `json:"use_regex"`
		}{}
		if err := json.Unmarshal(raw, &b); err != nil {
			return nil, fmt.Errorf("pre_tokenizer ByteLevel: %w", err)
		}
		return byteLevel{addPrefixSpace: b.AddPrefixSpace, useRegex: b.UseRegex == nil || *b.UseRegex}, nil
	case "Split":
		var s struct {
			Pattern  json.RawMessage `json:"pattern"`
			Behavior string          `json:"behavior"`
			Invert   bool            `json:"invert"`
		}
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, fmt.Errorf("pre_tokenizer Split: %w", err)
		}
		p, err := parsePattern(s.Pattern)
		if err != nil {
			return nil, fmt.Errorf("pre_tokenizer Split: %w", err)
		}
		b, ok := behaviors[s.Behavior]
		if !ok {
			return nil, fmt.Errorf("pre_tokenizer Split: behavior %q, want one of Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous", s.Behavior)
		}
		return splitPreTokenizer{pattern: p, behavior: b, invert: s.Invert}, nil
	case "Digits":
		var d struct {
			IndividualDigits bool `json:"individual_digits"`
		}
		if err := json.Unmarshal(raw, &d); err != nil {
			return nil, fmt.Errorf("pre_tokenizer Digits: %w", err)
		}
		return digits{individual: d.IndividualDigits}, nil
	case "Metaspace":
		m, err := parseMetaspace(raw)
		if err != nil {
			return nil, fmt.Errorf("pre_tokenizer Metaspace: %w", err)
		}
		return m, nil
	}
	return nil, fmt.Errorf("pre_tokenizer type %q is not supported; want Sequence, ByteLevel, Split, Digits or Metaspace", head.Type)
}

// sequencePreTokenizer applies its pre-tokenizers in turn.
type sequencePreTokenizer []preTokenizer

func (s sequencePreTokenizer) preTokenize(pieces []piece) []piece {
	for _, p := range s {
		pieces = p.preTokenize(pieces)
	}
	return pieces
}

// splitPieces cuts every piece into the spans cut returns, dropping empty
// pieces as tokenizers does; a span keeps atStart when it begins its
// piece.
func splitPieces(pieces []piece, cut func(text string) []span) []piece {
	out := make([]piece, 0, len(pieces))
	for _, p := range pieces {
		for _, s := range cut(p.text) {
			if s.drop || s.end == s.start {
				continue
			}
			out = append(out, piece{text: p.text[s.start:s.end], atStart: p.atStart && s.start == 0})
		}
	}
	return out
}

// splitPreTokenizer is Split: the pattern's matches (or, inverted, the
// text between them) cut the pieces as the behavior says.
type splitPreTokenizer struct {
	pattern  pattern
	behavior behavior
	invert   bool
}

func (s splitPreTokenizer) preTokenize(pieces []piece) []piece {
	return splitPieces(pieces, func(text string) []span {
		ms := s.pattern.find(text)
		if s.invert {
			for i := range ms {
				ms[i].matched = !ms[i].matched
			}
		}
		return s.behavior.apply(ms)
	})
}

// digits is Digits: runs of numeric characters (Rust's char::is_numeric,
// Unicode N) become their own pieces, or every digit its own piece.
type digits struct{ individual bool }

func (d digits) preTokenize(pieces []piece) []piece {
	b := contiguous
	if d.individual {
		b = isolated
	}
	return splitPieces(pieces, func(text string) []span {
		// As tokenizers' character patterns: each numeric character is a
		// match of its own, the text between them one gap.
		var ms []match
		gap := 0
		for i, r := range text {
			if !unicode.IsNumber(r) {
				continue
			}
			if gap < i {
				ms = append(ms, match{gap, i, false})
			}
			gap = i + utf8.RuneLen(r)
			ms = append(ms, match{i, gap, true})
		}
		if gap < len(text) {
			ms = append(ms, match{gap, len(text), false})
		}
		return b.apply(ms)
	})
}

// prepend schemes of Metaspace.
const (
	prependAlways = "always"
	prependFirst  = "first"
	prependNever  = "never"
)

// metaspace is Metaspace: spaces become the replacement character, one is
// prepended as the scheme says, and pieces are cut before each
// replacement character when split is set.
type metaspace struct {
	replacement string
	prepend     string
	split       bool
}

// parseMetaspace reads a Metaspace pre-tokenizer or decoder; files from
// before prepend_scheme existed give add_prefix_space instead.
func parseMetaspace(raw json.RawMessage) (metaspace, error) {
	var m struct {
		Replacement    string `json:"replacement"`
		PrependScheme  string `json:"prepend_scheme"`
		AddPrefixSpace *bool  `json:"add_prefix_space"`
		Split          *bool  `json:"split"`
	}
	if err := json.Unmarshal(raw, &m); err != nil {
		return metaspace{}, err
	}
	if utf8.RuneCountInString(m.Replacement) != 1 {
		return metaspace{}, fmt.Errorf("replacement %q, want one character", m.Replacement)
	}
	scheme := m.PrependScheme
	if scheme == "" {
		scheme = prependAlways
		if m.AddPrefixSpace != nil && !*m.AddPrefixSpace {
			scheme = prependNever
		}
	}
	if scheme != prependAlways && scheme != prependFirst && scheme != prependNever {
		return metaspace{}, fmt.Errorf("prepend_scheme %q, want always, first or never", scheme)
	}
	return metaspace{replacement: m.Replacement, prepend: scheme, split: m.Split == nil || *m.Split}, nil
}

func (m metaspace) preTokenize(pieces []piece) []piece {
	out := make([]piece, 0, len(pieces))
	for _, p := range pieces {
		text := strings.ReplaceAll(p.text, " ", m.replacement)
		if !strings.HasPrefix(text, m.replacement) &&
			(m.prepend == prependAlways || m.prepend == prependFirst && p.atStart) {
			text = m.replacement + text
		}
		if !m.split {
			out = append(out, piece{text: text, atStart: p.atStart})
			continue
		}
		sep := pattern{literal: m.replacement}
		out = append(out, splitPieces([]piece{{text: text, atStart: p.atStart}}, func(text string) []span {
			return mergedWithNext.apply(sep.find(text))
		})...)
	}
	return out
}

// isNull reports whether raw is absent or JSON null.
func isNull(raw json.RawMessage) bool {
	s := strings.TrimSpace(string(raw))
	return s == "" || s == "null"
}
