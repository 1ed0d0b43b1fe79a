package rl

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/posttrainllm/posttrainllm/data"
)

// Prompt is one training prompt: either Text (a "prompt" string) or
// Messages (a "messages" chat), rendered with the model's chat template
// before sampling. Fields holds every field of the record it was read
// from, "prompt" or "messages" included, so that reward functions can
// read the others (an "answer" to check against, a difficulty, test
// cases). JSON numbers in Fields are float64, as encoding/json decodes
// them.
type Prompt struct {
	Text     string
	Messages []data.Message
	Fields   map[string]any
}

// ReadPrompts reads the jsonl file at path: one JSON object per line,
// blank lines skipped, each with exactly one of "prompt" (a non-empty
// string) or "messages" (a non-empty list of {"role", "content"}
// turns), as in TRL's prompt-only datasets. Errors name the file, the
// line and what was expected; a file with no prompt is an error.
func ReadPrompts(path string) ([]Prompt, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("prompts: %w", err)
	}
	defer f.Close()
	return parsePrompts(f, path)
}

// parsePrompts reads jsonl prompts from r; name labels errors.
func parsePrompts(r io.Reader, name string) ([]Prompt, error) {
	return data.ParseJSONL(r, name, `"prompt" or "messages"`, func(b []byte, _ int) (Prompt, error) { return parsePrompt(b) })
}

// parsePrompt decodes and validates one line.
func parsePrompt(b []byte) (Prompt, error) {
	var fields map[string]any
	if err := json.Unmarshal(b, &fields); err != nil || fields == nil {
		if err == nil {
			err = errors.New("null")
		}
		return Prompt{}, fmt.Errorf("not a JSON object: %v", err)
	}
	text, hasText := fields["prompt"]
	msgs, hasMsgs := fields["messages"]
	switch {
	case hasText && hasMsgs:
		return Prompt{}, errors.New(`has both "prompt" and "messages"; want one of them`)
	case !hasText && !hasMsgs:
		return Prompt{}, errors.New(`no "prompt" or "messages" field`)
	}
	p := Prompt{Fields: fields}
	if hasText {
		s, ok := text.(string)
		switch {
		case !ok:
			return Prompt{}, fmt.Errorf(`"prompt" is %s, want a string`, jsonKind(text))
		case s == "":
			return Prompt{}, errors.New(`"prompt" is empty`)
		case strings.IndexByte(s, 0) >= 0:
			return Prompt{}, errors.New(`"prompt" contains a NUL character, the byte tokenizer's end of text`)
		}
		p.Text = s
		return p, nil
	}
	m, err := parseMessages(msgs)
	if err != nil {
		return Prompt{}, err
	}
	p.Messages = m
	return p, nil
}

// parseMessages validates a decoded "messages" value.
func parseMessages(v any) ([]data.Message, error) {
	list, ok := v.([]any)
	switch {
	case !ok:
		return nil, fmt.Errorf(`"messages" is %s, want a list of {"role", "content"} objects`, jsonKind(v))
	case len(list) == 0:
		return nil, errors.New(`"messages" is empty`)
	}
	out := make([]data.Message, len(list))
	for i, e := range list {
		obj, ok := e.(map[string]any)
		if !ok {
			return nil, fmt.Errorf(`"messages" item %d is %s, want a {"role", "content"} object`, i+1, jsonKind(e))
		}
		role, ok := obj["role"].(string)
		if !ok || !slices.Contains(data.Roles(), role) {
			return nil, fmt.Errorf(`"messages" item %d has "role" %s, want one of %s`, i+1, jsonValue(obj["role"]), strings.Join(data.Roles(), ", "))
		}
		content, ok := obj["content"].(string)
		switch {
		case !ok:
			return nil, fmt.Errorf(`"messages" item %d has "content" %s, want a string`, i+1, jsonValue(obj["content"]))
		case strings.IndexByte(content, 0) >= 0:
			return nil, fmt.Errorf(`"messages" item %d "content" contains a NUL character, the byte tokenizer's end of text`, i+1)
		}
		out[i] = data.Message{Role: role, Content: content}
	}
	return out, nil
}

// jsonKind names the JSON type of a decoded value, for error messages.
func jsonKind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case string:
		return "a string"
	case float64:
		return "a number"
	case bool:
		return "a boolean"
	case []any:
		return "a list"
	case map[string]any:
		return "an object"
	}
	return fmt.Sprintf("a %T", v)
}

// jsonValue shows a decoded value short, for error messages: strings
// quoted, missing values as "missing", others by kind.
func jsonValue(v any) string {
	switch x := v.(type) {
	case nil:
		return "missing or null"
	case string:
		if len(x) > 40 {
			x = x[:40] + "…"
		}
		return fmt.Sprintf("%q", x)
	}
	return jsonKind(v)
}
