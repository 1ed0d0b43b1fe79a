package generate

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"

	"github.com/posttrainllm/posttrainllm/data"
	"github.com/posttrainllm/posttrainllm/data/chattemplate"
)

// EndTokenFiles are the files of a Hugging Face folder whose eos_token_id
// (an id or a list of ids) names tokens that end generation.
var EndTokenFiles = []string{"config.json", "generation_config.json"}

// EndTokens returns the ids that end a model's generation, without
// repeats: the tokenizer's end-of-text id, eos_token_id of the
// EndTokenFiles in dirs (Llama 3.1 lists three there), and the id of
// tmpl's end-of-turn token (chattemplate.Template.EndOfTurn) when tmpl is
// not nil and its text is one token. Missing files are skipped.
func EndTokens(tok data.Tokenizer, tmpl *chattemplate.Template, dirs ...string) ([]int32, error) {
	ends := []int32{tok.EOT()}
	add := func(id int32) {
		if !slices.Contains(ends, id) {
			ends = append(ends, id)
		}
	}
	for _, dir := range dirs {
		for _, name := range EndTokenFiles {
			path := filepath.Join(dir, name)
			ids, err := readEOS(path)
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			if err != nil {
				return nil, err
			}
			for _, id := range ids {
				if id < 0 || int(id) >= tok.VocabSize() {
					return nil, fmt.Errorf("%s: eos_token_id %d is outside the tokenizer's %d ids", path, id, tok.VocabSize())
				}
				add(id)
			}
		}
	}
	if tmpl != nil {
		text, err := tmpl.EndOfTurn(tok)
		if err != nil {
			return nil, err
		}
		if text != "" {
			if ids := data.EncodeWithSpecials(tok, text); len(ids) == 1 {
				add(ids[0])
			}
		}
	}
	return ends, nil
}

// readEOS reads eos_token_id of the JSON file at path: none, an id or a
// list of ids.
func readEOS(path string) ([]int32, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var f struct {
		EOS json.RawMessage `json:"eos_token_id"`
	}
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(f.EOS) == 0 || string(f.EOS) == "null" {
		return nil, nil
	}
	var one int32
	if json.Unmarshal(f.EOS, &one) == nil {
		return []int32{one}, nil
	}
	var list []int32
	if err := json.Unmarshal(f.EOS, &list); err != nil {
		return nil, fmt.Errorf("%s: eos_token_id is %s; want an id or a list of ids", path, f.EOS)
	}
	return list, nil
}
