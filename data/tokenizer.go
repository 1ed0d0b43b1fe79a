package data

import (
	"fmt"
	"slices"
	"strings"
)

// Tokenizer maps text to token ids and back.
//
// Implementations are safe for concurrent use, so a corpus can be encoded
// on several goroutines at once.
type Tokenizer interface {
	// Name identifies the tokenizer ("byte", "gpt2", or "hf-" and a hash
	// of the file for a tokenizer.json, data/hftokenizer). It is part of
	// token cache keys and checkpoints, so it never changes for a given
	// mapping from text to ids.
	Name() string
	// VocabSize is the number of distinct ids; every id is in
	// [0, VocabSize).
	VocabSize() int
	// Encode returns the ids of text. It never returns EOT for corpus
	// text, so documents cannot forge separators: GPT-2 encodes the string
	// "<|endoftext|>" as ordinary characters, and the byte tokenizer's EOT
	// is NUL, which LoadCorpus rejects.
	Encode(text string) []int32
	// Decode returns the text of ids. Ids outside [0, VocabSize) decode to
	// U+FFFD so that a model's raw samples can always be printed.
	Decode(ids []int32) string
	// EOT is the end-of-text id placed between documents.
	EOT() int32
}

// tokenizerMakers lists the tokenizers NewTokenizer knows, by name.
var tokenizerMakers = map[string]func() Tokenizer{
	byteTokenizerName: func() Tokenizer { return byteTokenizer{} },
	gpt2TokenizerName: func() Tokenizer { return newGPT2() },
}

// tokenizerVocabSizes are the tokenizers' vocabulary sizes, known without
// building them (the GPT-2 tokenizer loads its ranks when built).
var tokenizerVocabSizes = map[string]int{byteTokenizerName: 256, gpt2TokenizerName: gpt2EOT + 1}

// TokenizerVocabSize returns the vocabulary size of the tokenizer called
// name without building it, for validating a configuration.
func TokenizerVocabSize(name string) (int, error) {
	v, ok := tokenizerVocabSizes[name]
	if !ok {
		return 0, fmt.Errorf("unknown tokenizer %q: want one of %s", name, strings.Join(TokenizerNames(), ", "))
	}
	return v, nil
}

// TokenizerNames returns the names NewTokenizer accepts, sorted, so that
// command-line help and error messages can list them.
func TokenizerNames() []string {
	return []string{byteTokenizerName, gpt2TokenizerName}
}

// NewTokenizer returns the tokenizer called name (see TokenizerNames).
func NewTokenizer(name string) (Tokenizer, error) {
	mk, ok := tokenizerMakers[name]
	if !ok {
		return nil, fmt.Errorf("unknown tokenizer %q: want one of %s", name, strings.Join(TokenizerNames(), ", "))
	}
	return mk(), nil
}

// SpecialTokenizer is a Tokenizer with special tokens (such as
// "<|im_start|>" or "<|eot_id|>") that can be written in text: chat
// templates and prompts spell them out, and they must become their own ids
// as Hugging Face's tokenizers library makes them by default. Encode keeps
// treating them as plain text, so corpus documents cannot forge a
// separator or a turn boundary.
type SpecialTokenizer interface {
	Tokenizer
	// EncodeSpecial returns the ids of text with every special token
	// written in it matched as that token's id, and the text between
	// them encoded as Encode does.
	EncodeSpecial(text string) []int32
	// SpecialTokens maps each special token's text to its id.
	SpecialTokens() map[string]int32
}

// PrefixedTokenizer is a tokenizer that puts fixed ids before every text
// it encodes as a whole (the <bos> that Gemma's and Llama 2's
// tokenizer.json post-processors add, as Hugging Face's tokenizer(text)
// does).
type PrefixedTokenizer interface {
	Tokenizer
	// PromptPrefix returns those ids, nil for none.
	PromptPrefix() []int32
}

// EncodePrompt is EncodeWithSpecials with tok's prompt prefix
// (PrefixedTokenizer) in front, unless the ids already start with it (a
// prompt or rendered chat template that writes <bos> itself): the ids of
// a completion prompt as the model saw its training text begin.
func EncodePrompt(tok Tokenizer, text string) []int32 {
	ids := EncodeWithSpecials(tok, text)
	p, ok := tok.(PrefixedTokenizer)
	if !ok {
		return ids
	}
	prefix := p.PromptPrefix()
	if len(prefix) == 0 || len(ids) >= len(prefix) && slices.Equal(ids[:len(prefix)], prefix) {
		return ids
	}
	return append(prefix, ids...)
}

// EncodeWithSpecials encodes text with tok's special tokens matched as
// their ids where tok has any (a SpecialTokenizer), and as Encode does
// otherwise: what prompts and chat templates are encoded with.
func EncodeWithSpecials(tok Tokenizer, text string) []int32 {
	if s, ok := tok.(SpecialTokenizer); ok {
		return s.EncodeSpecial(text)
	}
	return tok.Encode(text)
}
