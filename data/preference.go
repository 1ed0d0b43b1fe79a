package data

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
)

// PreferenceRecord is one example of a preference data set read from a
// jsonl file: a prompt and two answers to it, the chosen one preferred to
// the rejected one. Two forms are read, as in TRL's preference data sets:
//
//	{"prompt": "…", "chosen": "…", "rejected": "…"}
//	{"chosen": [messages…], "rejected": [messages…]}
//
// In the conversational form both conversations share every message but
// the last, an assistant reply in each; a "prompt" list of messages, when
// given, is put before both (TRL's explicit-prompt form). Other fields of
// a line are ignored.
type PreferenceRecord struct {
	// Chosen and Rejected are the two answers as fine-tuning records: two
	// CompletionRecords with the same Prompt, or two ChatRecords whose
	// messages differ in the last one only.
	Chosen, Rejected Record
	// Line is the record's line in its file, from 1, for error messages.
	Line int
}

// rawPreference is a preference line before validation: each field is a
// string or a list of messages.
type rawPreference struct {
	Prompt   json.RawMessage `json:"prompt"`
	Chosen   json.RawMessage `json:"chosen"`
	Rejected json.RawMessage `json:"rejected"`
}

// ReadPreferenceRecords reads the jsonl preference file at path: one JSON
// object per line, blank lines skipped. A line that is not a valid
// preference record is an error naming the file and line.
func ReadPreferenceRecords(path string) ([]PreferenceRecord, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("preference records: %w", err)
	}
	defer f.Close()
	return ParsePreferenceRecords(f, path)
}

// ParsePreferenceRecords reads jsonl preference records from r; name
// labels errors. An input with no record is an error.
func ParsePreferenceRecords(r io.Reader, name string) ([]PreferenceRecord, error) {
	return ParseJSONL(r, name, `"chosen" and "rejected"`, func(b []byte, line int) (PreferenceRecord, error) {
		rec, err := parsePreference(b)
		rec.Line, rec.Chosen.Line, rec.Rejected.Line = line, line, line
		return rec, err
	})
}

// parsePreference decodes and validates one line.
func parsePreference(b []byte) (PreferenceRecord, error) {
	var raw rawPreference
	if err := json.Unmarshal(b, &raw); err != nil {
		return PreferenceRecord{}, fmt.Errorf("not a JSON object: %w", err)
	}
	if raw.Chosen == nil || raw.Rejected == nil {
		return PreferenceRecord{}, errors.New(`want both "chosen" and "rejected"`)
	}
	var rec PreferenceRecord
	if isJSONString(raw.Chosen) || isJSONString(raw.Rejected) {
		var prompt, chosen, rejected string
		if raw.Prompt == nil {
			return PreferenceRecord{}, errors.New(`"chosen" and "rejected" are strings, want a "prompt" string too`)
		}
		for _, f := range []struct {
			name string
			raw  json.RawMessage
			dst  *string
		}{{"prompt", raw.Prompt, &prompt}, {"chosen", raw.Chosen, &chosen}, {"rejected", raw.Rejected, &rejected}} {
			if err := json.Unmarshal(f.raw, f.dst); err != nil {
				return PreferenceRecord{}, fmt.Errorf("%q is not a string (want prompt, chosen and rejected all strings or all messages): %w", f.name, err)
			}
		}
		rec.Chosen = Record{Kind: CompletionRecord, Prompt: prompt, Completion: chosen}
		rec.Rejected = Record{Kind: CompletionRecord, Prompt: prompt, Completion: rejected}
	} else {
		var err error
		if rec, err = parseConversations(raw); err != nil {
			return PreferenceRecord{}, err
		}
	}
	for _, r := range []struct {
		name string
		rec  Record
	}{{"chosen", rec.Chosen}, {"rejected", rec.Rejected}} {
		if s, ok := r.rec.nulField(); ok {
			return PreferenceRecord{}, fmt.Errorf("%q: %s contains a NUL character, the byte tokenizer's end of text", r.name, s)
		}
	}
	return rec, nil
}

// parseConversations reads the conversational form: "chosen" and
// "rejected" message lists (after an optional "prompt" list) that share
// all but their last message, an assistant reply.
func parseConversations(raw rawPreference) (PreferenceRecord, error) {
	var prompt, chosen, rejected []Message
	if raw.Prompt != nil {
		if err := json.Unmarshal(raw.Prompt, &prompt); err != nil {
			return PreferenceRecord{}, fmt.Errorf(`"prompt" is not a list of messages (with "chosen" and "rejected" messages): %w`, err)
		}
	}
	if err := json.Unmarshal(raw.Chosen, &chosen); err != nil {
		return PreferenceRecord{}, fmt.Errorf(`"chosen" is neither a string nor a list of messages: %w`, err)
	}
	if err := json.Unmarshal(raw.Rejected, &rejected); err != nil {
		return PreferenceRecord{}, fmt.Errorf(`"rejected" is neither a string nor a list of messages: %w`, err)
	}
	chosen = append(slices.Clip(prompt), chosen...)
	rejected = append(slices.Clip(prompt), rejected...)
	for _, c := range []struct {
		name string
		msgs []Message
	}{{"chosen", chosen}, {"rejected", rejected}} {
		if len(c.msgs) < 2 {
			return PreferenceRecord{}, fmt.Errorf("%q has %d messages, want a prompt and an assistant reply", c.name, len(c.msgs))
		}
		for i, m := range c.msgs {
			if !isRole(m.Role) {
				return PreferenceRecord{}, fmt.Errorf("%q message %d has role %q, want one of %s", c.name, i+1, m.Role, strings.Join(Roles(), ", "))
			}
		}
		if last := c.msgs[len(c.msgs)-1]; last.Role != "assistant" {
			return PreferenceRecord{}, fmt.Errorf("%q ends with a %q message, want an assistant reply", c.name, last.Role)
		}
	}
	if len(chosen) != len(rejected) || !slices.Equal(chosen[:len(chosen)-1], rejected[:len(rejected)-1]) {
		return PreferenceRecord{}, errors.New(`"chosen" and "rejected" differ before their last message; want the same conversation with a different final assistant reply`)
	}
	if prev := chosen[len(chosen)-2]; prev.Role == "assistant" {
		return PreferenceRecord{}, errors.New(`the reply follows another assistant message; want it to answer a user (or system) message`)
	}
	return PreferenceRecord{Chosen: Record{Kind: ChatRecord, Messages: chosen}, Rejected: Record{Kind: ChatRecord, Messages: rejected}}, nil
}

// isJSONString reports whether a raw JSON value is a string.
func isJSONString(raw json.RawMessage) bool {
	b := bytes.TrimSpace(raw)
	return len(b) > 0 && b[0] == '"'
}

// KeepLastSpan returns e with only its last run of counted tokens still
// counted: a rendered preference conversation's final reply (and the end
// of turn closing it), not the assistant turns of the shared prompt.
func KeepLastSpan(e Example) Example {
	end := len(e.Train)
	for end > 0 && !e.Train[end-1] {
		end--
	}
	start := end
	for start > 0 && e.Train[start-1] {
		start--
	}
	train := make([]bool, len(e.Train))
	for i := start; i < end; i++ {
		train[i] = true
	}
	return Example{Tokens: e.Tokens, Train: train}
}

// PairExample is a preference record rendered as tokens: the chosen and
// the rejected example, their prompts masked.
type PairExample struct {
	Chosen, Rejected Example
	// Line is the record's line in its file, for error messages.
	Line int
}

// BuildPairRows lays preference pairs out in padded rows of T targets,
// one example per row, pair i's chosen answer in row 2i and its rejected
// one in row 2i+1 (Rows.Pairs), so a sampler keeps them together. An
// answer longer than the context is cut (Rows.Truncated); a pair of which
// either answer has no counted target within the context is left out and
// counted in Rows.NoTargets, since its preference cannot be measured. A
// set with no pair left is an error.
func BuildPairRows(pairs []PairExample, T int, pad int32) (*Rows, error) {
	if T < 1 {
		return nil, fmt.Errorf("pair rows: context %d, want >= 1", T)
	}
	r := &Rows{T: T, Pairs: true}
	for _, p := range pairs {
		var rows [2]*Rows
		for k, e := range []Example{p.Chosen, p.Rejected} {
			rows[k] = &Rows{T: T}
			n := len(e.Tokens)
			if n > T+1 {
				rows[k].Truncated++
				n = T + 1
			}
			rows[k].add(e.Tokens[:n], e.Train[:n], pad)
		}
		if rows[0].NoTargets > 0 || rows[1].NoTargets > 0 {
			r.NoTargets++
			continue
		}
		for _, one := range rows {
			r.X, r.Y, r.W = append(r.X, one.X...), append(r.Y, one.Y...), append(r.W, one.W...)
			r.Truncated += one.Truncated
		}
	}
	if r.Len() == 0 {
		return nil, fmt.Errorf("pair rows: none of %d pairs has answers with targets that count within the context of %d tokens", len(pairs), T)
	}
	return r, nil
}
