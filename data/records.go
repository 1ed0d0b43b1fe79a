package data

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
)

// Record is one fine-tuning example read from a jsonl file: exactly one of
// Text, Prompt/Completion or Messages is set, as in mlx-lm's and TRL's
// dataset formats:
//
//	{"text": "…"}                                    every token counts
//	{"prompt": "…", "completion": "…"}               the completion counts
//	{"messages": [{"role": "user", "content": "…"}, {"role": "assistant", "content": "…"}]}
//
// Other fields of a line are ignored.
type Record struct {
	Text               string
	Prompt, Completion string
	Messages           []Message
	// Kind says which form the record has.
	Kind RecordKind
	// Line is the record's line in its file, from 1, for error messages.
	Line int
}

// RecordKind is the form of a Record.
type RecordKind int

// Record forms.
const (
	TextRecord       RecordKind = iota // {"text"}
	CompletionRecord                   // {"prompt", "completion"}
	ChatRecord                         // {"messages"}
)

// Message is one turn of a chat record.
type Message struct {
	Role    string `json:"role"` // "system", "user" or "assistant"
	Content string `json:"content"`
}

// Roles lists the chat roles a Message may have.
func Roles() []string { return []string{"system", "user", "assistant"} }

// rawRecord is a jsonl line before validation; pointers tell a missing
// field from an empty one.
type rawRecord struct {
	Text       *string    `json:"text"`
	Prompt     *string    `json:"prompt"`
	Completion *string    `json:"completion"`
	Messages   *[]Message `json:"messages"`
}

// ReadRecords reads the jsonl file at path: one JSON object per line,
// blank lines skipped. A line that is not a valid record is an error
// naming the file and line.
func ReadRecords(path string) ([]Record, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("records: %w", err)
	}
	defer f.Close()
	return ParseRecords(f, path)
}

// ParseRecords reads jsonl records from r; name labels errors. An input
// with no record is an error.
func ParseRecords(r io.Reader, name string) ([]Record, error) {
	return ParseJSONL(r, name, "text, prompt/completion or messages", func(b []byte, line int) (Record, error) {
		rec, err := parseRecord(b)
		rec.Line = line
		return rec, err
	})
}

// parseRecord decodes and validates one line.
func parseRecord(b []byte) (Record, error) {
	var raw rawRecord
	if err := json.Unmarshal(b, &raw); err != nil {
		return Record{}, fmt.Errorf("not a JSON object: %w", err)
	}
	var kinds []string
	if raw.Text != nil {
		kinds = append(kinds, "text")
	}
	if raw.Prompt != nil || raw.Completion != nil {
		kinds = append(kinds, "prompt/completion")
	}
	if raw.Messages != nil {
		kinds = append(kinds, "messages")
	}
	switch {
	case len(kinds) == 0:
		return Record{}, errors.New(`no "text", "prompt"/"completion" or "messages" field`)
	case len(kinds) > 1:
		return Record{}, fmt.Errorf("has both %s; want one form per record", strings.Join(kinds, " and "))
	}
	var rec Record
	switch {
	case raw.Text != nil:
		rec = Record{Kind: TextRecord, Text: *raw.Text}
		if rec.Text == "" {
			return Record{}, errors.New(`"text" is empty`)
		}
	case raw.Messages != nil:
		rec = Record{Kind: ChatRecord, Messages: *raw.Messages}
		if len(rec.Messages) == 0 {
			return Record{}, errors.New(`"messages" is empty`)
		}
		for i, m := range rec.Messages {
			if !isRole(m.Role) {
				return Record{}, fmt.Errorf("message %d has role %q, want one of %s", i+1, m.Role, strings.Join(Roles(), ", "))
			}
		}
	default:
		if raw.Prompt == nil || raw.Completion == nil {
			return Record{}, errors.New(`want both "prompt" and "completion"`)
		}
		rec = Record{Kind: CompletionRecord, Prompt: *raw.Prompt, Completion: *raw.Completion}
	}
	if s, ok := rec.nulField(); ok {
		return Record{}, fmt.Errorf("%s contains a NUL character, the byte tokenizer's end of text", s)
	}
	return rec, nil
}

func isRole(r string) bool {
	for _, x := range Roles() {
		if r == x {
			return true
		}
	}
	return false
}

// nulField names a field that holds a NUL character: text cannot forge
// the end-of-text marker.
func (r Record) nulField() (string, bool) {
	has := func(s string) bool { return strings.IndexByte(s, 0) >= 0 }
	switch {
	case has(r.Text):
		return `"text"`, true
	case has(r.Prompt):
		return `"prompt"`, true
	case has(r.Completion):
		return `"completion"`, true
	}
	for i, m := range r.Messages {
		if has(m.Content) {
			return fmt.Sprintf("message %d", i+1), true
		}
	}
	return "", false
}
