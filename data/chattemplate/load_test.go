package chattemplate

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/posttrainllm/posttrainllm/data"
)

// writeFiles writes name → content files into a fresh folder.
func writeFiles(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestLoad reads the template the ways Hugging Face folders carry it: a
// string in tokenizer_config.json with string or AddedToken special
// tokens, a list of named templates (its "default"), and a
// chat_template.jinja that wins over tokenizer_config.json's.
func TestLoad(t *testing.T) {
	msgs := []data.Message{{Role: "user", Content: "hi"}}
	for _, tc := range []struct {
		name  string
		files map[string]string
		want  string
	}{
		{"string", map[string]string{ConfigFile: `{"chat_template": "{{ bos_token }}{{ messages[0].content }}{{ eos_token }}", "bos_token": "<s>", "eos_token": "</s>"}`}, "<s>hi</s>"},
		{"added tokens", map[string]string{ConfigFile: `{"chat_template": "{{ bos_token }}|{{ eos_token }}", "bos_token": {"content": "<B>", "lstrip": false}, "eos_token": null}`}, "<B>|"},
		{"named", map[string]string{ConfigFile: `{"chat_template": [{"name": "tool_use", "template": "T"}, {"name": "default", "template": "D{{ messages|length }}"}]}`}, "D1"},
		{"jinja file", map[string]string{ConfigFile: `{"chat_template": "config", "eos_token": "<E>"}`, JinjaFile: "file{{ eos_token }}"}, "file<E>"},
		{"jinja file alone", map[string]string{JinjaFile: "{% for m in messages %}{{ m.role }}{% endfor %}\n"}, "user"}, // jinja2 drops one trailing newline
	} {
		tpl, err := Load(writeFiles(t, tc.files))
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		got, err := tpl.Render(msgs, false)
		if err != nil || got != tc.want {
			t.Fatalf("%s: rendered %q, %v; want %q", tc.name, got, err, tc.want)
		}
	}
}

// TestLoadErrors: a folder without a template wraps ErrNoTemplate; a list
// without "default", a malformed file or token and a template that does
// not compile are errors naming what is wrong.
func TestLoadErrors(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files map[string]string
		want  string
	}{
		{"none", map[string]string{}, "no chat template"},
		{"no template key", map[string]string{ConfigFile: `{"eos_token": "</s>"}`}, "no chat template"},
		{"no default", map[string]string{ConfigFile: `{"chat_template": [{"name": "rag", "template": "R"}]}`}, `none named "default"`},
		{"bad json", map[string]string{ConfigFile: `{"chat_template": `}, ConfigFile},
		{"bad token", map[string]string{ConfigFile: `{"chat_template": "x", "eos_token": 3}`}, "eos_token"},
		{"bad template", map[string]string{JinjaFile: "{% for m in messages %}"}, JinjaFile},
	} {
		_, err := Load(writeFiles(t, tc.files))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("%s: %v, want an error containing %q", tc.name, err, tc.want)
		}
		if tc.want == "no chat template" && !errors.Is(err, ErrNoTemplate) {
			t.Fatalf("%s: %v does not wrap ErrNoTemplate", tc.name, err)
		}
	}
}
