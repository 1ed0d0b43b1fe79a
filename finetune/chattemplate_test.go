package finetune

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/posttrainllm/posttrainllm/internal/tokentest"
	"github.com/posttrainllm/posttrainllm/train"
)

// A run imported with a chat template fine-tunes chat records in that
// template: the targets that count are each assistant content and its
// <|im_end|>; text records keep the built-in rendering; a run without
// tokenizer files has no template.
func TestFineTuneRowsUseRunTemplate(t *testing.T) {
	tok := tokentest.NewBytes("<|endoftext|>", "<|endoftext|>", "<|im_start|>", "<|im_end|>")
	run := t.TempDir()
	if tmpl, err := train.RunTemplate(run); err != nil || tmpl != nil {
		t.Fatalf("a run without %s: template %v, %v; want none", train.TokenizerDir, tmpl, err)
	}
	src, err := os.ReadFile(filepath.Join("..", "data", "chattemplate", "testdata", "smollm2.jinja"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(run, train.TokenizerDir), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(run, train.TokenizerDir, "chat_template.jinja"), src, 0o644); err != nil {
		t.Fatal(err)
	}
	tmpl, err := train.RunTemplate(run)
	if err != nil || tmpl == nil {
		t.Fatalf("template %v, %v", tmpl, err)
	}
	jsonl := filepath.Join(t.TempDir(), "chat.jsonl")
	lines := `{"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": "Bye"}, {"role": "assistant", "content": "Farewell."}]}
{"text": "plain"}
`
	if err := os.WriteFile(jsonl, []byte(lines), 0o644); err != nil {
		t.Fatal(err)
	}
	rows, err := LoadTemplateRows(jsonl, tok, tmpl, 256, true, false)
	if err != nil {
		t.Fatal(err)
	}
	var spans []string
	var cur []int32
	for i, w := range rows.W {
		if w > 0 {
			cur = append(cur, rows.Y[i])
		} else if cur != nil {
			spans = append(spans, tok.Decode(cur))
			cur = nil
		}
	}
	want := []string{"Hello!<|im_end|>", "Farewell.<|im_end|>", "lain<|endoftext|>"}
	if !slices.Equal(spans, want) {
		t.Fatalf("counted targets %q, want %q", spans, want)
	}
	if rows.Len() != 2 {
		t.Fatalf("%d rows, want 2", rows.Len())
	}
	bad := filepath.Join(t.TempDir(), "bad.jsonl")
	if err := os.WriteFile(bad, []byte(`{"messages": [{"role": "assistant", "content": "first"}]}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadTemplateRows(bad, tok, tmpl, 256, true, false); err == nil || !strings.Contains(err.Error(), "line 1") {
		t.Fatalf("a reply with nothing before it: %v, want an error naming line 1", err)
	}
}
