package hf

import (
	"fmt"
	"sort"
	"unicode/utf8"
)

// spmSpace is SentencePiece's meta symbol for a space (U+2581).
const spmSpace = "▁"

// sentencePieceTokenizer is the tokenizer.json, less its post-processor
// and unknown token, of a SentencePiece vocabulary (tokenizer.ggml.model
// llama): tokens with scores, byte tokens <0xXX> and added ones.
//
// llama.cpp encodes such a vocabulary as SentencePiece's BPE does: spaces
// become ▁ (and one is put in front of the text with add_space_prefix),
// the text splits into characters, and the adjacent pair whose
// concatenation is a normal token of the highest score merges first; a
// character no token spells becomes its UTF-8 byte tokens. A BPE model of
// tokenizers with byte_fallback computes the same given, for each normal
// token, a merge of every split of it into two normal tokens, ranked by
// the merged token's score, highest first (Hugging Face's own
// SentencePiece converter ranks them so). The scores must be distinct
// among normal tokens: equal scores leave llama.cpp's order to a token's
// position, which a ranked list cannot express.
func sentencePieceTokenizer(m ggufMeta, tokens []string, types []int64, vocab map[string]int) (map[string]any, error) {
	v, ok := m["tokenizer.ggml.scores"]
	if !ok {
		return nil, fmt.Errorf("metadata tokenizer.ggml.scores is missing: a SentencePiece vocabulary needs its scores")
	}
	if len(v.Floats) != len(tokens) || v.Scalar {
		return nil, fmt.Errorf("metadata tokenizer.ggml.scores has %d numbers for %d tokens", len(v.Floats), len(tokens))
	}
	scores := v.Floats
	normal := func(id int) bool { return types[id] == tokenNormal || types[id] == 0 }
	var ranked []int
	for id := range tokens {
		if normal(id) {
			ranked = append(ranked, id)
		}
	}
	sort.SliceStable(ranked, func(i, j int) bool { return scores[ranked[i]] > scores[ranked[j]] })
	for i := 1; i < len(ranked); i++ {
		if a, b := ranked[i-1], ranked[i]; scores[a] == scores[b] {
			return nil, fmt.Errorf("tokens %q (id %d) and %q (id %d) have the same score %g: SentencePiece merges by distinct scores",
				tokens[a], a, tokens[b], b, scores[a])
		}
	}
	merges := make([][2]string, 0, len(ranked))
	for _, id := range ranked {
		tok := tokens[id]
		type split struct{ left, right int }
		var splits []split
		for i := range tok {
			if i == 0 {
				continue
			}
			l, okL := vocab[tok[:i]]
			r, okR := vocab[tok[i:]]
			if okL && okR && normal(l) && normal(r) {
				splits = append(splits, split{l, r})
			}
		}
		sort.Slice(splits, func(i, j int) bool {
			if splits[i].left != splits[j].left {
				return splits[i].left < splits[j].left
			}
			return splits[i].right < splits[j].right
		})
		for _, s := range splits {
			merges = append(merges, [2]string{tokens[s.left], tokens[s.right]})
		}
	}
	for b := range 256 {
		name := fmt.Sprintf("<0x%02X>", b)
		if id, ok := vocab[name]; !ok || types[id] != tokenByte {
			return nil, fmt.Errorf("byte token %s is missing or not of type BYTE (6): SentencePiece's byte fallback needs all 256", name)
		}
	}
	for _, tok := range tokens {
		if !utf8.ValidString(tok) {
			return nil, fmt.Errorf("token %q is not valid UTF-8", tok)
		}
	}
	replaceSpace := map[string]any{"type": "Replace", "pattern": map[string]any{"String": " "}, "content": spmSpace}
	normalizer := replaceSpace
	decoders := []map[string]any{
		{"type": "Replace", "pattern": map[string]any{"String": spmSpace}, "content": " "},
		{"type": "ByteFallback"}, {"type": "Fuse"},
	}
	if m.flag("tokenizer.ggml.add_space_prefix") {
		normalizer = map[string]any{"type": "Sequence", "normalizers": []map[string]any{
			{"type": "Prepend", "prepend": spmSpace}, replaceSpace}}
		decoders = append(decoders, map[string]any{"type": "Strip", "content": " ", "start": 1, "stop": 0})
	}
	return map[string]any{
		"version": "1.0", "truncation": nil, "padding": nil, "added_tokens": addedTokens(tokens, types, false),
		"normalizer": normalizer, "pre_tokenizer": nil,
		"decoder": map[string]any{"type": "Sequence", "decoders": decoders},
		"model": map[string]any{
			"type": "BPE", "dropout": nil, "unk_token": nil, "continuing_subword_prefix": nil,
			"end_of_word_suffix": nil, "fuse_unk": true, "byte_fallback": true, "ignore_merges": false,
			"vocab": vocab, "merges": merges,
		},
	}, nil
}
