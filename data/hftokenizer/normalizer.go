package hftokenizer

import (
	"encoding/json"
	"fmt"

	"golang.org/x/text/unicode/norm"
)

// normalizer rewrites a piece of text before pre-tokenization.
type normalizer interface {
	normalize(text string) string
}

// parseNormalizer reads the normalizer of tokenizer.json; null is none
// (nil).
func parseNormalizer(raw json.RawMessage) (normalizer, error) {
	if isNull(raw) {
		return nil, nil
	}
	var head struct {
		Type string `json:"type"`
	}
	if err := json.Unmarshal(raw, &head); err != nil {
		return nil, fmt.Errorf("normalizer %s: %w", raw, err)
	}
	switch head.Type {
	case "Sequence":
		var s struct {
			Normalizers []json.RawMessage `json:"normalizers"`
		}
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, fmt.Errorf("normalizer Sequence: %w", err)
		}
		var seq sequenceNormalizer
		for _, r := range s.Normalizers {
			n, err := parseNormalizer(r)
			if err != nil {
				return nil, err
			}
			if n != nil {
				seq = append(seq, n)
			}
		}
		return seq, nil
	case "NFC":
		return unicodeForm{norm.NFC}, nil
	case "NFD":
		return unicodeForm{norm.NFD}, nil
	case "NFKC":
		return unicodeForm{norm.NFKC}, nil
	case "NFKD":
		return unicodeForm{norm.NFKD}, nil
	case "Prepend":
		var p struct {
			Prepend string `json:"prepend"`
		}
		if err := json.Unmarshal(raw, &p); err != nil {
			return nil, fmt.Errorf("normalizer Prepend: %w", err)
		}
		return prepend(p.Prepend), nil
	case "Replace":
		r, err := parseReplace(raw)
		if err != nil {
			return nil, fmt.Errorf("normalizer Replace: %w", err)
		}
		return r, nil
	}
	return nil, fmt.Errorf("normalizer type %q is not supported; want Sequence, NFC, NFD, NFKC, NFKD, Prepend or Replace", head.Type)
}

// sequenceNormalizer applies its normalizers in turn.
type sequenceNormalizer []normalizer

func (s sequenceNormalizer) normalize(text string) string {
	for _, n := range s {
		text = n.normalize(text)
	}
	return text
}

// unicodeForm is a Unicode normalization form (NFC, NFD, NFKC, NFKD).
type unicodeForm struct{ form norm.Form }

func (u unicodeForm) normalize(text string) string { return u.form.String(text) }

// prepend is Prepend: its text before every non-empty piece.
type prepend string

func (p prepend) normalize(text string) string {
	if text == "" {
		return text
	}
	return string(p) + text
}

// replace is Replace, as a normalizer or a decoder: every match of the
// pattern becomes content.
type replace struct {
	pattern pattern
	content string
}

// parseReplace reads a Replace normalizer or decoder.
func parseReplace(raw json.RawMessage) (replace, error) {
	var r struct {
		Pattern json.RawMessage `json:"pattern"`
		Content string          `json:"content"`
	}
	if err := json.Unmarshal(raw, &r); err != nil {
		return replace{}, err
	}
	p, err := parsePattern(r.Pattern)
	if err != nil {
		return replace{}, err
	}
	return replace{pattern: p, content: r.Content}, nil
}

func (r replace) normalize(text string) string { return r.pattern.replaceAll(text, r.content) }
