// Package hftokenizer reads Hugging Face tokenizer.json files: the
// tokenizer of an imported model, as a data.SpecialTokenizer whose ids are
// those of Hugging Face's tokenizers library. It owns the small pipeline
// that published BPE models use (see docs/huggingface.md for the
// components supported) and fails on a file with any other component,
// naming it.
package hftokenizer

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"unicode/utf8"

	"github.com/posttrainllm/posttrainllm/data"
)

// pipelineVersion joins the file in the tokenizer's name: it changes when
// this package's mapping from text to ids changes for some file, so that
// token caches made by an earlier version are not reused.
const pipelineVersion = 2

// Tokenizer is the tokenizer of a Hugging Face tokenizer.json: added
// tokens matched in text, then the normalizer, the pre-tokenizer and the
// BPE model, each as tokenizers applies them; Decode runs the file's
// decoder. Encode adds no special tokens (no BOS) and treats special-token
// strings in text as ordinary text, so a document cannot forge an
// end-of-text separator; EncodeSpecial matches them as tokenizers does by
// default. It is safe for concurrent use.
type Tokenizer struct {
	name  string
	vocab int
	eos   int32

	normalizer   normalizer   // nil: none
	preTokenizer preTokenizer // nil: none
	model        wordModel
	decoder      decoder // nil: tokens joined with spaces
	// raw matches the added tokens that are not normalized, in the input;
	// normalized those that are, in normalized text.
	raw, normalized *matcher
	special         map[string]int32
	tokens          []string // id -> token text, "" for an unused id
	// prefix are the ids the post-processor puts before a single text
	// (TemplateProcessing's special tokens ahead of $A: Gemma's and Llama
	// 2's <bos>), nil for none.
	prefix []int32
}

// eosNames are end-of-text tokens, most likely first, for files that
// name no EOS.
var eosNames = []string{"<|endoftext|>", "</s>", "<|end_of_text|>", "<|im_end|>", "<eos>"}

// Load reads a tokenizer.json. The end-of-text id is the eos_token of
// tokenizer_config.json beside it when there is one, else the first
// special token of the file named like an end-of-text token.
func Load(path string) (*Tokenizer, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	t, err := parse(raw)
	if err != nil {
		return nil, fmt.Errorf("tokenizer %s: %w", path, err)
	}
	eos, err := findEOS(filepath.Dir(path), t.special)
	if err != nil {
		return nil, fmt.Errorf("tokenizer %s: %w", path, err)
	}
	t.eos = eos
	// The end-of-text id joins the file in the name: documents in a token
	// cache are separated by it, so two runs with one tokenizer.json but
	// different eos_token must not share a cache.
	sum := sha256.Sum256(fmt.Appendf(raw, "\x00eos=%d\x00pipeline=%d", eos, pipelineVersion))
	t.name = "hf-" + hex.EncodeToString(sum[:8])
	return t, nil
}

// parse builds the tokenizer of the contents of a tokenizer.json.
func parse(raw []byte) (*Tokenizer, error) {
	var file struct {
		AddedTokens   json.RawMessage `json:"added_tokens"`
		Normalizer    json.RawMessage `json:"normalizer"`
		PreTokenizer  json.RawMessage `json:"pre_tokenizer"`
		Model         json.RawMessage `json:"model"`
		Decoder       json.RawMessage `json:"decoder"`
		PostProcessor json.RawMessage `json:"post_processor"`
	}
	if err := json.Unmarshal(raw, &file); err != nil {
		return nil, fmt.Errorf("not a valid tokenizer.json: %w", err)
	}
	if isNull(file.Model) {
		return nil, fmt.Errorf("no model: a tokenizer.json has one")
	}
	t := &Tokenizer{special: map[string]int32{}}
	var err error
	if t.model, err = parseModel(file.Model); err != nil {
		return nil, err
	}
	if t.normalizer, err = parseNormalizer(file.Normalizer); err != nil {
		return nil, err
	}
	if t.preTokenizer, err = parsePreTokenizer(file.PreTokenizer); err != nil {
		return nil, err
	}
	if t.decoder, err = parseDecoder(file.Decoder); err != nil {
		return nil, err
	}
	added, err := parseAddedTokens(file.AddedTokens)
	if err != nil {
		return nil, err
	}
	if t.prefix, err = parsePrefix(file.PostProcessor); err != nil {
		return nil, err
	}
	t.raw = newMatcher(added, func(a addedToken) bool { return !a.Normalized })
	t.normalized = newMatcher(added, func(a addedToken) bool { return a.Normalized })
	for _, id := range t.model.vocabulary() {
		t.vocab = max(t.vocab, int(id)+1)
	}
	for _, a := range added {
		t.vocab = max(t.vocab, a.ID+1)
		if a.Special {
			t.special[a.Content] = int32(a.ID)
		}
	}
	t.tokens = make([]string, t.vocab)
	for tok, id := range t.model.vocabulary() {
		t.tokens[id] = tok
	}
	for _, a := range added {
		t.tokens[a.ID] = a.Content
	}
	return t, nil
}

// findEOS finds the end-of-text id among the special tokens: the eos_token
// of tokenizer_config.json in dir, or a token named like one.
func findEOS(dir string, special map[string]int32) (int32, error) {
	if b, err := os.ReadFile(filepath.Join(dir, "tokenizer_config.json")); err == nil {
		var cfg struct {
			EOS json.RawMessage `json:"eos_token"`
		}
		if err := json.Unmarshal(b, &cfg); err != nil {
			return 0, fmt.Errorf("tokenizer_config.json: %w", err)
		}
		var name string
		if json.Unmarshal(cfg.EOS, &name) != nil {
			var obj struct {
				Content string `json:"content"`
			}
			_ = json.Unmarshal(cfg.EOS, &obj)
			name = obj.Content
		}
		if name != "" {
			id, ok := special[name]
			if !ok {
				return 0, fmt.Errorf("tokenizer_config.json: eos_token %q is not a special token of tokenizer.json", name)
			}
			return id, nil
		}
	}
	for _, name := range eosNames {
		if id, ok := special[name]; ok {
			return id, nil
		}
	}
	return 0, fmt.Errorf("no end-of-text token: want eos_token in tokenizer_config.json or a special token named one of %q", eosNames)
}

// Name is "hf-" and a hash of the tokenizer.json and the end-of-text id:
// the same file and EOS, the same name, for token caches and checkpoints.
func (t *Tokenizer) Name() string { return t.name }

// VocabSize is one more than the largest id of the vocabulary and the
// added tokens.
func (t *Tokenizer) VocabSize() int { return t.vocab }

// EOT is the end-of-text (EOS) id.
func (t *Tokenizer) EOT() int32 { return t.eos }

// SpecialTokens maps the text of each added token marked special to its
// id.
func (t *Tokenizer) SpecialTokens() map[string]int32 {
	m := make(map[string]int32, len(t.special))
	for k, v := range t.special {
		m[k] = v
	}
	return m
}

// Encode returns the ids of text as tokenizers gives them without special
// tokens added and with special-token strings encoded as text (its
// encode_special_tokens); added tokens that are not special still match.
// A character that the vocabulary can express neither as a token, bytes
// nor an unknown token is left out, as tokenizers leaves it out.
func (t *Tokenizer) Encode(text string) []int32 { return t.encode(text, false) }

// EncodeSpecial returns the ids of text as tokenizers gives them by
// default without special tokens added: special tokens written in text
// become their ids, honouring their lstrip, rstrip, single_word and
// normalized settings.
func (t *Tokenizer) EncodeSpecial(text string) []int32 { return t.encode(text, true) }

// encode runs the pipeline, matching special tokens when specials is set.
func (t *Tokenizer) encode(text string, specials bool) []int32 {
	ids := make([]int32, 0, len(text)/3+1)
	for _, seg := range t.raw.split(text, specials) {
		if seg.token != nil {
			ids = append(ids, int32(seg.token.ID))
			continue
		}
		part := text[seg.start:seg.end]
		if part == "" {
			continue
		}
		if t.normalizer != nil {
			part = t.normalizer.normalize(part)
		}
		for _, nseg := range t.normalized.split(part, specials) {
			if nseg.token != nil {
				ids = append(ids, int32(nseg.token.ID))
				continue
			}
			if nseg.end == nseg.start {
				continue
			}
			pieces := []piece{{text: part[nseg.start:nseg.end], atStart: seg.start == 0 && nseg.start == 0}}
			if t.preTokenizer != nil {
				pieces = t.preTokenizer.preTokenize(pieces)
			}
			for _, p := range pieces {
				ids = t.model.encode(ids, p.text)
			}
		}
	}
	if len(ids) == 0 {
		return nil
	}
	return ids
}

// PromptPrefix returns the ids tokenizers' post-processor puts before
// every single text it encodes with special tokens added (Gemma's <bos>),
// nil for none. Encode and EncodeSpecial leave them out;
// data.EncodePrompt adds them.
func (t *Tokenizer) PromptPrefix() []int32 { return append([]int32(nil), t.prefix...) }

// parsePrefix reads the ids a TemplateProcessing post-processor puts in
// front of the single sequence $A; other post-processors add none there.
func parsePrefix(raw json.RawMessage) ([]int32, error) {
	if isNull(raw) {
		return nil, nil
	}
	var p struct {
		Type   string            `json:"type"`
		Single []json.RawMessage `json:"single"`
		// special_tokens maps each template token to its ids.
		Special map[string]struct {
			IDs []int32 `json:"ids"`
		} `json:"special_tokens"`
		Processors []json.RawMessage `json:"processors"`
	}
	if err := json.Unmarshal(raw, &p); err != nil {
		return nil, fmt.Errorf("post_processor: %w", err)
	}
	if p.Type == "Sequence" {
		var prefix []int32
		for _, r := range p.Processors {
			ids, err := parsePrefix(r)
			if err != nil {
				return nil, err
			}
			prefix = append(prefix, ids...)
		}
		return prefix, nil
	}
	if p.Type != "TemplateProcessing" {
		return nil, nil
	}
	var prefix []int32
	for _, r := range p.Single {
		var piece struct {
			Special *struct {
				ID string `json:"id"`
			} `json:"SpecialToken"`
		}
		if err := json.Unmarshal(r, &piece); err != nil {
			return nil, fmt.Errorf("post_processor: template piece %s: %w", r, err)
		}
		if piece.Special == nil {
			break // $A: the text itself
		}
		st, ok := p.Special[piece.Special.ID]
		if !ok {
			return nil, fmt.Errorf("post_processor: template token %q is not in special_tokens", piece.Special.ID)
		}
		prefix = append(prefix, st.IDs...)
	}
	return prefix, nil
}

// Decode returns the text of ids as tokenizers decodes them, special
// tokens included. Ids outside [0, VocabSize) decode to U+FFFD.
func (t *Tokenizer) Decode(ids []int32) string {
	var out strings.Builder
	run := make([]string, 0, len(ids))
	flush := func() {
		if len(run) == 0 {
			return
		}
		if t.decoder == nil {
			out.WriteString(strings.Join(run, " "))
		} else {
			for _, s := range t.decoder.decodeChain(run) {
				out.WriteString(s)
			}
		}
		run = run[:0]
	}
	for _, id := range ids {
		if id < 0 || int(id) >= t.vocab {
			flush()
			out.WriteRune(utf8.RuneError)
			continue
		}
		if tok := t.tokens[id]; tok != "" {
			run = append(run, tok)
		}
	}
	flush()
	return out.String()
}

var _ data.SpecialTokenizer = (*Tokenizer)(nil)
