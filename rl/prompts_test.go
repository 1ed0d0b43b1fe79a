package rl

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/posttrainllm/posttrainllm/data"
)

// writeFile writes content to name in a fresh temporary directory and
// returns its path.
func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestReadPromptsGood(t *testing.T) {
	path := writeFile(t, "train.jsonl", `{"prompt": "What is 2+3?", "answer": "5"}

{"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "7*6?"}], "answer": 42, "level": "easy"}
`)
	got, err := ReadPrompts(path)
	if err != nil {
		t.Fatal(err)
	}
	want := []Prompt{
		{Text: "What is 2+3?", Fields: map[string]any{"prompt": "What is 2+3?", "answer": "5"}},
		{
			Messages: []data.Message{{Role: "system", Content: "Be brief."}, {Role: "user", Content: "7*6?"}},
			Fields: map[string]any{
				"messages": []any{
					map[string]any{"role": "system", "content": "Be brief."},
					map[string]any{"role": "user", "content": "7*6?"},
				},
				"answer": 42.0,
				"level":  "easy",
			},
		},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("ReadPrompts:\n got %#v\nwant %#v", got, want)
	}
}

func TestReadPromptsBad(t *testing.T) {
	for _, tc := range []struct {
		name, content string
		want          []string // substrings of the error
	}{
		{"empty", "\n\n", []string{"no records", `"prompt" or "messages"`}},
		{"neither", `{"prompt": "a"}` + "\n" + `{"question": "b", "answer": 1}`, []string{":2:", `no "prompt" or "messages"`}},
		{"both", `{"prompt": "a", "messages": [{"role": "user", "content": "b"}]}`, []string{":1:", "both", `"prompt"`, `"messages"`}},
		{"not json", `{"prompt": "a"}` + "\n\n" + `{"prompt": `, []string{":3:", "not a JSON object"}},
		{"array line", `["prompt"]`, []string{":1:", "not a JSON object"}},
		{"prompt number", `{"prompt": 12}`, []string{":1:", `"prompt" is a number, want a string`}},
		{"prompt empty", `{"prompt": ""}`, []string{":1:", `"prompt" is empty`}},
		{"prompt NUL", `{"prompt": "a\u0000b"}`, []string{":1:", `"prompt"`, "NUL"}},
		{"messages string", `{"messages": "hi"}`, []string{":1:", `"messages" is a string`, "want a list"}},
		{"messages empty", `{"messages": []}`, []string{":1:", `"messages" is empty`}},
		{"message not object", `{"messages": [{"role": "user", "content": "a"}, 3]}`, []string{":1:", `"messages" item 2 is a number`}},
		{"bad role", `{"messages": [{"role": "robot", "content": "a"}]}`, []string{":1:", `item 1 has "role" "robot"`, "system, user, assistant"}},
		{"no role", `{"messages": [{"content": "a"}]}`, []string{`item 1 has "role" missing`}},
		{"no content", `{"messages": [{"role": "user"}]}`, []string{":1:", `item 1 has "content" missing`}},
		{"content list", `{"messages": [{"role": "user", "content": ["a"]}]}`, []string{`"content" a list, want a string`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := writeFile(t, "p.jsonl", tc.content)
			_, err := ReadPrompts(path)
			if err == nil {
				t.Fatalf("no error for %q", tc.content)
			}
			for _, w := range append(tc.want, path) {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestReadPromptsMissingFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "none.jsonl")
	if _, err := ReadPrompts(path); err == nil || !strings.Contains(err.Error(), path) {
		t.Fatalf("error %v, want one naming %s", err, path)
	}
}
