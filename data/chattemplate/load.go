package chattemplate

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// Files a Hugging Face folder keeps its chat template in.
const (
	// JinjaFile holds the template alone; newer transformers write it
	// beside tokenizer_config.json, and it wins over that file's.
	JinjaFile = "chat_template.jinja"
	// ConfigFile holds chat_template, bos_token and eos_token.
	ConfigFile = "tokenizer_config.json"
)

// DefaultName is the template Load picks from a tokenizer_config.json
// whose chat_template is a list of named templates, as transformers does.
const DefaultName = "default"

// tokenizerConfig is the part of tokenizer_config.json Load reads.
type tokenizerConfig struct {
	ChatTemplate json.RawMessage `json:"chat_template"`
	BOS          json.RawMessage `json:"bos_token"`
	EOS          json.RawMessage `json:"eos_token"`
}

// Load reads the chat template of the tokenizer files in dir: the text of
// chat_template.jinja when there is one, else tokenizer_config.json's
// chat_template (a string, or a list of {"name", "template"} of which it
// takes "default"), with that file's bos_token and eos_token. A folder
// with neither returns an error that wraps ErrNoTemplate.
func Load(dir string) (*Template, error) {
	var cfg tokenizerConfig
	cfgPath := filepath.Join(dir, ConfigFile)
	raw, err := os.ReadFile(cfgPath)
	switch {
	case err == nil:
		if err := json.Unmarshal(raw, &cfg); err != nil {
			return nil, fmt.Errorf("chat template: %s: %w", cfgPath, err)
		}
	case !errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("chat template: %w", err)
	}
	bos, err := tokenText(cfg.BOS)
	if err != nil {
		return nil, fmt.Errorf("chat template: %s: bos_token: %w", cfgPath, err)
	}
	eos, err := tokenText(cfg.EOS)
	if err != nil {
		return nil, fmt.Errorf("chat template: %s: eos_token: %w", cfgPath, err)
	}
	source, from := "", ""
	jinjaPath := filepath.Join(dir, JinjaFile)
	if b, err := os.ReadFile(jinjaPath); err == nil {
		source, from = string(b), jinjaPath
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("chat template: %w", err)
	} else if len(cfg.ChatTemplate) > 0 && string(cfg.ChatTemplate) != "null" {
		if source, err = pickTemplate(cfg.ChatTemplate); err != nil {
			return nil, fmt.Errorf("chat template: %s: %w", cfgPath, err)
		}
		from = cfgPath
	}
	if source == "" {
		return nil, fmt.Errorf("%s: %w (want %s, or chat_template in %s)", dir, ErrNoTemplate, JinjaFile, ConfigFile)
	}
	t, err := New(source, bos, eos)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", from, err)
	}
	return t, nil
}

// pickTemplate returns the template of a chat_template value: the string
// itself, or the entry named DefaultName of a list of named templates.
func pickTemplate(raw json.RawMessage) (string, error) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	var named []struct {
		Name     string `json:"name"`
		Template string `json:"template"`
	}
	if err := json.Unmarshal(raw, &named); err != nil {
		return "", fmt.Errorf("chat_template is neither a string nor a list of {\"name\", \"template\"}: %w", err)
	}
	names := make([]string, len(named))
	for i, n := range named {
		if n.Name == DefaultName {
			return n.Template, nil
		}
		names[i] = fmt.Sprintf("%q", n.Name)
	}
	return "", fmt.Errorf("chat_template lists templates %s and none named %q", strings.Join(names, ", "), DefaultName)
}

// tokenText reads a special token of tokenizer_config.json: a string, an
// AddedToken object {"content": …}, or null or absent for none.
func tokenText(raw json.RawMessage) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	var obj struct {
		Content *string `json:"content"`
	}
	if err := json.Unmarshal(raw, &obj); err != nil || obj.Content == nil {
		return "", fmt.Errorf("%s is neither a string nor an object with \"content\"", raw)
	}
	return *obj.Content, nil
}
