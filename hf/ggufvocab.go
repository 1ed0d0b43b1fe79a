package hf

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/posttrainllm/posttrainllm/mlx"
)

// llama.cpp's token types (tokenizer.ggml.token_type).
const (
	tokenNormal      = 1
	tokenUnknown     = 2
	tokenControl     = 3
	tokenUserDefined = 4
	tokenUnused      = 5
	tokenByte        = 6
)

// byteLevel is the ByteLevel pre-tokenizer, decoder and post-processor
// of a tokenizer.json.
func byteLevel(trimOffsets, useRegex bool) map[string]any {
	return map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": trimOffsets, "use_regex": useRegex}
}

func split(pattern string) map[string]any {
	return map[string]any{"type": "Split", "pattern": map[string]any{"Regex": pattern}, "behavior": "Isolated", "invert": false}
}

func sequence(steps ...map[string]any) map[string]any {
	return map[string]any{"type": "Sequence", "pretokenizers": steps}
}

// ggufPreTokenizer is the normalizer and pre_tokenizer of the tokenizer.json
// of a model family, by llama.cpp's name for its pre-tokenization
// (tokenizer.ggml.pre), as that family's own tokenizer.json has them.
type ggufPreTokenizer struct {
	normalizer, preTokenizer map[string]any
}

var ggufPreTokenizers = map[string]ggufPreTokenizer{
	// GPT-2's byte-level split.
	"gpt-2": {preTokenizer: byteLevel(true, true)},
	// SmolLM and SmolLM2: every digit alone, then GPT-2's split.
	"smollm": {preTokenizer: sequence(map[string]any{"type": "Digits", "individual_digits": true}, byteLevel(true, true))},
	// Llama 3: numbers in runs of up to three digits.
	"llama-bpe": {preTokenizer: sequence(
		split(`(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`),
		byteLevel(true, false))},
	// Qwen2 and Qwen2.5: NFC first, every digit alone.
	"qwen2": {normalizer: map[string]any{"type": "NFC"}, preTokenizer: sequence(
		split(`(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`),
		byteLevel(false, false))},
}

// GGUFPreTokenizers are the tokenizer.ggml.pre names whose tokenizer.json
// pre-tokenizer LoadGGUF writes.
func GGUFPreTokenizers() []string {
	names := make([]string, 0, len(ggufPreTokenizers))
	for n := range ggufPreTokenizers {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// ggufMeta reads typed values out of a GGUF file's metadata.
type ggufMeta map[string]mlx.GGUFValue

func (m ggufMeta) str(key string) (string, bool, error) {
	v, ok := m[key]
	if !ok {
		return "", false, nil
	}
	if v.Kind != mlx.GGUFString {
		return "", true, fmt.Errorf("metadata %s is not a string", key)
	}
	return v.String, true, nil
}

func (m ggufMeta) strs(key string) ([]string, error) {
	v, ok := m[key]
	if !ok {
		return nil, fmt.Errorf("metadata %s is missing", key)
	}
	if v.Kind != mlx.GGUFStrings {
		return nil, fmt.Errorf("metadata %s is not an array of strings", key)
	}
	return v.Strings, nil
}

// id reads a token id, checking it names one of n tokens.
func (m ggufMeta) id(key string, n int) (int, bool, error) {
	v, ok := m[key]
	if !ok {
		return 0, false, nil
	}
	if v.Kind != mlx.GGUFNumbers || !v.Scalar || v.Ints == nil {
		return 0, true, fmt.Errorf("metadata %s is not an integer", key)
	}
	if v.Ints[0] < 0 || v.Ints[0] >= int64(n) {
		return 0, true, fmt.Errorf("metadata %s = %d is not one of the %d token ids", key, v.Ints[0], n)
	}
	return int(v.Ints[0]), true, nil
}

func (m ggufMeta) flag(key string) bool {
	v, ok := m[key]
	return ok && v.Kind == mlx.GGUFNumbers && v.Scalar && len(v.Floats) == 1 && v.Floats[0] != 0
}

// ggufTokenizerFiles makes tokenizer.json, tokenizer_config.json and
// generation_config.json from a GGUF file's tokenizer.ggml.* metadata and
// tokenizer.chat_template: for tokenizer.ggml.model gpt2 a byte-level BPE
// with the file's tokens and merges and the pre-tokenizer of the family
// tokenizer.ggml.pre names; for llama a SentencePiece vocabulary as a BPE
// by scores with byte fallback (ggufspm.go). CONTROL tokens become
// special added tokens, USER_DEFINED ones plain added tokens. The tokens
// must fit the model's vocabulary of vocabSize ids.
func ggufTokenizerFiles(meta map[string]mlx.GGUFValue, vocabSize int) (map[string][]byte, error) {
	m := ggufMeta(meta)
	kind, ok, err := m.str("tokenizer.ggml.model")
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("metadata tokenizer.ggml.model is missing: the file has no tokenizer")
	}
	if kind != "gpt2" && kind != "llama" {
		return nil, fmt.Errorf("tokenizer.ggml.model %q is not supported; want gpt2 (byte-level BPE) or llama (SentencePiece)", kind)
	}
	tokens, err := m.strs("tokenizer.ggml.tokens")
	if err != nil {
		return nil, err
	}
	if len(tokens) > vocabSize {
		return nil, fmt.Errorf("tokenizer.ggml.tokens has %d tokens, the model's vocabulary %d", len(tokens), vocabSize)
	}
	types := make([]int64, len(tokens))
	if v, ok := m["tokenizer.ggml.token_type"]; ok {
		if v.Kind != mlx.GGUFNumbers || v.Scalar || len(v.Ints) != len(tokens) {
			return nil, fmt.Errorf("metadata tokenizer.ggml.token_type has %d integers for %d tokens", len(v.Ints), len(tokens))
		}
		types = v.Ints
	}
	vocab := make(map[string]int, len(tokens))
	for i, tok := range tokens {
		if _, dup := vocab[tok]; dup {
			return nil, fmt.Errorf("token %q (id %d) is in tokenizer.ggml.tokens twice", tok, i)
		}
		vocab[tok] = i
		if types[i] < 0 || types[i] > tokenByte {
			return nil, fmt.Errorf("token %q (id %d) has token type %d; want 1 to 6", tok, i, types[i])
		}
	}
	ids := map[string]int{}
	for _, name := range []string{"bos", "eos", "unknown", "padding", "eot"} {
		key := "tokenizer.ggml." + name + "_token_id"
		id, ok, err := m.id(key, len(tokens))
		if err != nil {
			return nil, err
		}
		if ok {
			ids[name] = id
		}
	}
	eos, ok := ids["eos"]
	if !ok {
		return nil, fmt.Errorf("metadata tokenizer.ggml.eos_token_id is missing")
	}
	var tok map[string]any
	if kind == "gpt2" {
		tok, err = byteLevelTokenizer(m, tokens, types, vocab)
	} else {
		tok, err = sentencePieceTokenizer(m, tokens, types, vocab)
	}
	if err != nil {
		return nil, err
	}
	tok["post_processor"] = postProcessor(m, tokens, ids)
	if kind == "llama" && !m.flag("tokenizer.ggml.add_bos_token") && !m.flag("tokenizer.ggml.add_eos_token") {
		tok["post_processor"] = nil // no byte-level offsets to trim
	}
	if id, ok := ids["unknown"]; ok {
		tok["model"].(map[string]any)["unk_token"] = tokens[id]
	}
	cfg := map[string]any{
		"tokenizer_class": "PreTrainedTokenizerFast", "clean_up_tokenization_spaces": false,
		"add_bos_token": m.flag("tokenizer.ggml.add_bos_token"), "add_eos_token": m.flag("tokenizer.ggml.add_eos_token"),
		"eos_token": tokens[eos],
	}
	for name, key := range map[string]string{"bos": "bos_token", "unknown": "unk_token", "padding": "pad_token"} {
		if id, ok := ids[name]; ok {
			cfg[key] = tokens[id]
		}
	}
	if tmpl, ok, err := m.str("tokenizer.chat_template"); err != nil {
		return nil, err
	} else if ok {
		cfg["chat_template"] = tmpl
	}
	if arch, _, _ := m.str("general.architecture"); arch == GGUFGemma3 {
		if _, ok := cfg["chat_template"]; !ok {
			cfg["chat_template"] = gemma3ChatTemplate
		}
		if id, ok := vocab[gemma3EndOfTurn]; ok {
			if _, set := ids["eot"]; !set {
				ids["eot"] = id
			}
		}
	}
	gen := map[string]any{"eos_token_id": eos}
	if eot, ok := ids["eot"]; ok && eot != eos {
		gen["eos_token_id"] = []int{eos, eot}
	}
	if bos, ok := ids["bos"]; ok {
		gen["bos_token_id"] = bos
	}
	files := map[string][]byte{}
	for name, v := range map[string]any{"tokenizer.json": tok, "tokenizer_config.json": cfg, "generation_config.json": gen} {
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		enc.SetIndent("", " ")
		if err := enc.Encode(v); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		files[name] = buf.Bytes()
	}
	return files, nil
}

// byteLevelTokenizer is the tokenizer.json, less its post-processor and
// unknown token, of a byte-level BPE (tokenizer.ggml.model gpt2): the
// file's merges and the pre-tokenizer of tokenizer.ggml.pre's family.
func byteLevelTokenizer(m ggufMeta, tokens []string, types []int64, vocab map[string]int) (map[string]any, error) {
	pre, ok, err := m.str("tokenizer.ggml.pre")
	if err != nil {
		return nil, err
	}
	pt, known := ggufPreTokenizers[pre]
	if !ok || !known {
		return nil, fmt.Errorf("tokenizer.ggml.pre %q is not supported; want one of %q", pre, GGUFPreTokenizers())
	}
	merges, err := m.strs("tokenizer.ggml.merges")
	if err != nil {
		return nil, err
	}
	for i, mg := range merges {
		if a, b, ok := strings.Cut(mg, " "); !ok || strings.Contains(b, " ") || a == "" || b == "" {
			return nil, fmt.Errorf("merge %d %q is not two tokens separated by one space", i, mg)
		}
	}
	tok := map[string]any{
		"version": "1.0", "truncation": nil, "padding": nil, "added_tokens": addedTokens(tokens, types, true),
		"normalizer": pt.normalizer, "pre_tokenizer": pt.preTokenizer, "decoder": byteLevel(true, true),
		"model": map[string]any{
			"type": "BPE", "dropout": nil, "unk_token": nil, "continuing_subword_prefix": nil,
			"end_of_word_suffix": nil, "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
			"vocab": vocab, "merges": merges,
		},
	}
	if pt.normalizer == nil {
		tok["normalizer"] = nil
	}
	return tok, nil
}

// addedTokens are the added_tokens of a tokenizer.json: CONTROL tokens as
// special ones, USER_DEFINED ones as plain ones, matched in normalized
// text where normalized is set (byte-level files) and in the raw text
// otherwise (SentencePiece, as llama.cpp matches them).
func addedTokens(tokens []string, types []int64, normalized bool) []map[string]any {
	var added []map[string]any
	for i, tok := range tokens {
		if types[i] != tokenControl && types[i] != tokenUserDefined {
			continue
		}
		special := types[i] == tokenControl
		added = append(added, map[string]any{"id": i, "content": tok, "single_word": false, "lstrip": false,
			"rstrip": false, "normalized": normalized && !special, "special": special})
	}
	return added
}

// postProcessor adds the bos (and eos) tokens that the file's
// add_bos_token (add_eos_token) asks for to every encoded text, as the
// family's TemplateProcessing does; without them, GPT-2's byte-level
// post-processor, which adds nothing.
func postProcessor(m ggufMeta, tokens []string, ids map[string]int) map[string]any {
	var single, pair []any
	special := map[string]any{}
	add := func(name string, typeID int) []any {
		id, ok := ids[name]
		if !ok {
			return nil
		}
		special[tokens[id]] = map[string]any{"id": tokens[id], "ids": []int{id}, "tokens": []string{tokens[id]}}
		return []any{map[string]any{"SpecialToken": map[string]any{"id": tokens[id], "type_id": typeID}}}
	}
	seq := func(name string, typeID int) any {
		return map[string]any{"Sequence": map[string]any{"id": name, "type_id": typeID}}
	}
	bos, eos := m.flag("tokenizer.ggml.add_bos_token"), m.flag("tokenizer.ggml.add_eos_token")
	if !bos && !eos {
		return byteLevel(false, true)
	}
	for _, part := range []struct {
		seq    string
		typeID int
		out    *[]any
	}{{"A", 0, &single}, {"A", 0, &pair}, {"B", 1, &pair}} {
		if bos {
			*part.out = append(*part.out, add("bos", part.typeID)...)
		}
		*part.out = append(*part.out, seq(part.seq, part.typeID))
		if eos {
			*part.out = append(*part.out, add("eos", part.typeID)...)
		}
	}
	return map[string]any{"type": "TemplateProcessing", "single": single, "pair": pair, "special_tokens": special}
}
