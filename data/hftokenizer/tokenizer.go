// Package hftokenizer reads Hugging Face tokenizer.json files: the
// tokenizer of an imported model, as a data.Tokenizer. It is a package of
// its own because the library it uses links a terminal progress bar, which
// the training packages keep out of programs that import them.
package hftokenizer

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"unicode/utf8"

	"github.com/sugarme/tokenizer"
	"github.com/sugarme/tokenizer/pretrained"
)

// Tokenizer is the tokenizer of a Hugging Face tokenizer.json, read with
// github.com/sugarme/tokenizer (a Go port of Hugging Face's tokenizers)
// and its BPE merges applied as tokenizers applies them (bpeModel): byte-level
// BPE as GPT-2 and Llama 3 use, and SentencePiece-style BPE with byte
// fallback as Llama 2 and SmolLM use. Encode adds no special
// tokens (no BOS) and treats special-token strings in text as ordinary
// text, so a document cannot forge an end-of-text separator.
type Tokenizer struct {
	name  string
	vocab int
	eos   int32
	// mu serialises the library's tokenizer, whose caches are not
	// documented as safe for concurrent use.
	mu sync.Mutex
	tk *tokenizer.Tokenizer
}

// eosNames are end-of-text tokens, most likely first, for files that
// name no EOS.
var eosNames = []string{"<|endoftext|>", "</s>", "<|end_of_text|>", "<|im_end|>", "<eos>"}

// Load reads a tokenizer.json. The end-of-text id is the
// eos_token of tokenizer_config.json beside it when there is one, else
// the first special token of the file named like an end-of-text token.
func Load(path string) (*Tokenizer, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	var file map[string]json.RawMessage
	if err := json.Unmarshal(raw, &file); err != nil {
		return nil, fmt.Errorf("tokenizer %s: not a valid tokenizer.json: %w", path, err)
	}
	var added []struct {
		ID      int    `json:"id"`
		Content string `json:"content"`
		Special bool   `json:"special"`
	}
	if a, ok := file["added_tokens"]; ok {
		if err := json.Unmarshal(a, &added); err != nil {
			return nil, fmt.Errorf("tokenizer %s: added_tokens: %w", path, err)
		}
	}
	var model struct {
		Type         string         `json:"type"`
		Vocab        map[string]int `json:"vocab"`
		ByteFallback bool           `json:"byte_fallback"`
		FuseUnk      bool           `json:"fuse_unk"`
		IgnoreMerges bool           `json:"ignore_merges"`
	}
	if err := json.Unmarshal(file["model"], &model); err != nil {
		return nil, fmt.Errorf("tokenizer %s: model: %w", path, err)
	}
	if model.Type != "BPE" {
		return nil, fmt.Errorf("tokenizer %s: model type %q is not supported; want BPE (byte-level or with byte fallback)", path, model.Type)
	}
	// Special tokens are matched in text by the library; leaving them out
	// of its added vocabulary makes them ordinary text. The model's own
	// vocabulary still decodes their ids.
	special := map[string]int{}
	var kept []json.RawMessage
	var all []json.RawMessage
	if a, ok := file["added_tokens"]; ok {
		_ = json.Unmarshal(a, &all)
	}
	for i, t := range added {
		if t.Special {
			special[t.Content] = t.ID
			continue
		}
		kept = append(kept, all[i])
	}
	if file["added_tokens"], err = json.Marshal(kept); err != nil {
		return nil, fmt.Errorf("tokenizer %s: %w", path, err)
	}
	stripped, err := json.Marshal(file)
	if err != nil {
		return nil, fmt.Errorf("tokenizer %s: %w", path, err)
	}
	tk, err := pretrained.FromReader(bytes.NewReader(stripped))
	if err != nil {
		return nil, fmt.Errorf("tokenizer %s: %w", path, err)
	}
	m, err := newBPEModel(tk.GetModel(), model.ByteFallback, model.FuseUnk, model.IgnoreMerges)
	if err != nil {
		return nil, fmt.Errorf("tokenizer %s: %w", path, err)
	}
	tk.WithModel(m)
	t := &Tokenizer{tk: tk}
	for _, id := range model.Vocab {
		t.vocab = max(t.vocab, id+1)
	}
	for _, a := range added {
		t.vocab = max(t.vocab, a.ID+1)
	}
	eos, err := findEOS(filepath.Dir(path), special)
	if err != nil {
		return nil, fmt.Errorf("tokenizer %s: %w", path, err)
	}
	t.eos = int32(eos)
	// The end-of-text id joins the file in the name: documents in a token
	// cache are separated by it, so two runs with one tokenizer.json but
	// different eos_token must not share a cache.
	sum := sha256.Sum256(fmt.Appendf(raw, "\x00eos=%d", eos))
	t.name = "hf-" + hex.EncodeToString(sum[:8])
	return t, nil
}

// findEOS finds the end-of-text id among the special tokens: the eos_token
// of tokenizer_config.json in dir, or a token named like one.
func findEOS(dir string, special map[string]int) (int, error) {
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

// Encode returns the ids of text as Hugging Face's tokenizers gives them
// without special tokens.
func (t *Tokenizer) Encode(text string) []int32 {
	if text == "" {
		return nil
	}
	t.mu.Lock()
	en, err := t.tk.EncodeSingle(text, false)
	t.mu.Unlock()
	if err != nil {
		// bpeModel fails only on a character outside a vocabulary that has
		// neither byte fallback nor an unknown token.
		return nil
	}
	ids := make([]int32, len(en.Ids))
	for i, id := range en.Ids {
		ids[i] = int32(id)
	}
	return ids
}

// Decode returns the text of ids, special tokens included. Ids outside
// [0, VocabSize) decode to U+FFFD.
func (t *Tokenizer) Decode(ids []int32) string {
	var out []byte
	run := make([]int, 0, len(ids))
	flush := func() {
		if len(run) > 0 {
			t.mu.Lock()
			out = append(out, t.tk.Decode(run, false)...)
			t.mu.Unlock()
			run = run[:0]
		}
	}
	for _, id := range ids {
		if id < 0 || int(id) >= t.vocab {
			flush()
			out = utf8.AppendRune(out, utf8.RuneError)
			continue
		}
		run = append(run, int(id))
	}
	flush()
	return string(out)
}
