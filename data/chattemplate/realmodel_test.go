package chattemplate

import (
	"bytes"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"

	"github.com/posttrainllm/posttrainllm/data"
	"github.com/posttrainllm/posttrainllm/data/hftokenizer"
	"github.com/posttrainllm/posttrainllm/internal/realmodel"
)

// TestEncodeSmolLM2 encodes a multi-turn conversation with the real
// SmolLM2-135M-Instruct's template and tokenizer: the ids are those of
// Hugging Face's tokenizers for the text jinja2 renders (apply_chat_template
// with tokenize=True), and the counted tokens decode to each assistant
// content followed by <|im_end|>.
func TestEncodeSmolLM2(t *testing.T) {
	dir := realmodel.Folder(t)
	tpl, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := hftokenizer.Load(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	msgs := []data.Message{
		{Role: "user", Content: "What is the capital of France?"},
		{Role: "assistant", Content: "The capital of France is Paris."},
		{Role: "user", Content: "And  of Italy?\n\nBe brief."},
		{Role: "assistant", Content: " Rome.\n"},
	}
	ex, err := tpl.Encode(msgs, tok, true)
	if err != nil {
		t.Fatal(err)
	}
	got := counted(ex, tok)
	want := []string{msgs[1].Content + "<|im_end|>", msgs[3].Content + "<|im_end|>"}
	if !slices.Equal(got, want) {
		t.Fatalf("counted %q, want %q", got, want)
	}
	text, err := tpl.Render(msgs, false)
	if err != nil {
		t.Fatal(err)
	}
	ref := pythonRender(t, []refCase{{readTemplate(t, "smollm2.jinja"), msgs, false, tpl.BOS, tpl.EOS, testNow.Format("2006-01-02T15:04:05")}})
	if ref[0].Text == nil || *ref[0].Text != text {
		t.Fatalf("rendered %q, jinja2 %+v", text, ref[0])
	}
	script := `import json, sys
from tokenizers import Tokenizer
t = Tokenizer.from_file(sys.argv[1])
print(json.dumps(t.encode(sys.stdin.read(), add_special_tokens=False).ids))`
	cmd := exec.Command(python(t), "-c", script, filepath.Join(dir, "tokenizer.json"))
	cmd.Stdin = bytes.NewBufferString(text)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("tokenizers: %v", err)
	}
	var ids []int32
	if err := json.Unmarshal(out, &ids); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ex.Tokens, ids) {
		t.Fatalf("ids %v\ntokenizers %v", ex.Tokens, ids)
	}
}
