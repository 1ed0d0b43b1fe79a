package hftokenizer

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// decoder turns the tokens of ids back into text, as tokenizers'
// Decoder::decode_chain does: each decoder maps the list of token strings
// to another, and the decoded text is the last list joined.
type decoder interface {
	decodeChain(tokens []string) []string
}

// parseDecoder reads the decoder of tokenizer.json; null is none (nil).
func parseDecoder(raw json.RawMessage) (decoder, error) {
	if isNull(raw) {
		return nil, nil
	}
	var head struct {
		Type string `json:"type"`
	}
	if err := json.Unmarshal(raw, &head); err != nil {
		return nil, fmt.Errorf("decoder %s: %w", raw, err)
	}
	switch head.Type {
	case "Sequence":
		var s struct {
			Decoders []json.RawMessage `json:"decoders"`
		}
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, fmt.Errorf("decoder Sequence: %w", err)
		}
		var seq sequenceDecoder
		for _, r := range s.Decoders {
			d, err := parseDecoder(r)
			if err != nil {
				return nil, err
			}
			if d != nil {
				seq = append(seq, d)
			}
		}
		return seq, nil
	case "ByteLevel":
		return byteLevelDecoder{}, nil
	case "Metaspace":
		m, err := parseMetaspace(raw)
		if err != nil {
			return nil, fmt.Errorf("decoder Metaspace: %w", err)
		}
		return metaspaceDecoder(m), nil
	case "ByteFallback":
		return byteFallback{}, nil
	case "Fuse":
		return fuse{}, nil
	case "Strip":
		var s struct {
			Content string `json:"content"`
			Start   int    `json:"start"`
			Stop    int    `json:"stop"`
		}
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, fmt.Errorf("decoder Strip: %w", err)
		}
		if utf8.RuneCountInString(s.Content) != 1 || s.Start < 0 || s.Stop < 0 {
			return nil, fmt.Errorf("decoder Strip: content %q, start %d, stop %d; want one character and counts >= 0", s.Content, s.Start, s.Stop)
		}
		r, _ := utf8.DecodeRuneInString(s.Content)
		return strip{content: r, start: s.Start, stop: s.Stop}, nil
	case "Replace":
		r, err := parseReplace(raw)
		if err != nil {
			return nil, fmt.Errorf("decoder Replace: %w", err)
		}
		return r, nil
	}
	return nil, fmt.Errorf("decoder type %q is not supported; want Sequence, ByteLevel, Metaspace, ByteFallback, Fuse, Strip or Replace", head.Type)
}

// sequenceDecoder applies its decoders in turn.
type sequenceDecoder []decoder

func (s sequenceDecoder) decodeChain(tokens []string) []string {
	for _, d := range s {
		tokens = d.decodeChain(tokens)
	}
	return tokens
}

// metaspaceDecoder is the Metaspace decoder: replacement characters become
// spaces, except in the first token, where they are dropped unless the
// prepend scheme is never (tokenizers drops them all there, not only the
// leading one).
type metaspaceDecoder metaspace

func (m metaspaceDecoder) decodeChain(tokens []string) []string {
	out := make([]string, len(tokens))
	for i, t := range tokens {
		with := " "
		if i == 0 && m.prepend != prependNever {
			with = ""
		}
		out[i] = strings.ReplaceAll(t, m.replacement, with)
	}
	return out
}

// byteFallback is ByteFallback: runs of byte tokens <0xXX> become the
// text of their bytes, or one U+FFFD per byte when those are not valid
// UTF-8.
type byteFallback struct{}

func (byteFallback) decodeChain(tokens []string) []string {
	out := make([]string, 0, len(tokens))
	var run []byte
	flush := func() {
		if len(run) == 0 {
			return
		}
		if utf8.Valid(run) {
			out = append(out, string(run))
		} else {
			for range run {
				out = append(out, "\ufffd")
			}
		}
		run = run[:0]
	}
	for _, t := range tokens {
		if len(t) == 6 && strings.HasPrefix(t, "<0x") && t[5] == '>' {
			if b, err := strconv.ParseUint(t[3:5], 16, 8); err == nil {
				run = append(run, byte(b))
				continue
			}
		}
		flush()
		out = append(out, t)
	}
	flush()
	return out
}

// fuse is Fuse: all tokens joined into one.
type fuse struct{}

func (fuse) decodeChain(tokens []string) []string { return []string{strings.Join(tokens, "")} }

// strip is Strip: up to start leading and stop trailing content characters
// removed from every token.
type strip struct {
	content     rune
	start, stop int
}

func (s strip) decodeChain(tokens []string) []string {
	out := make([]string, len(tokens))
	for i, t := range tokens {
		for n := 0; n < s.start; n++ {
			r, size := utf8.DecodeRuneInString(t)
			if size == 0 || r != s.content {
				break
			}
			t = t[size:]
		}
		for n := 0; n < s.stop; n++ {
			r, size := utf8.DecodeLastRuneInString(t)
			if size == 0 || r != s.content {
				break
			}
			t = t[:len(t)-size]
		}
		out[i] = t
	}
	return out
}

func (r replace) decodeChain(tokens []string) []string {
	out := make([]string, len(tokens))
	for i, t := range tokens {
		out[i] = r.pattern.replaceAll(t, r.content)
	}
	return out
}
