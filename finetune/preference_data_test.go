package finetune

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/posttrainllm/posttrainllm/data"
	"github.com/posttrainllm/posttrainllm/internal/tokentest"
	"github.com/posttrainllm/posttrainllm/train"
)

// countedSpans decodes each run of counted targets of rows, row by row.
func countedSpans(rows *data.Rows, decode func([]int32) string) [][]string {
	y, w, T := rows.Y, rows.W, rows.T
	out := make([][]string, rows.Len())
	for r := range out {
		var cur []int32
		for i := r * T; i < (r+1)*T; i++ {
			if w[i] > 0 {
				cur = append(cur, y[i])
			} else if cur != nil {
				out[r] = append(out[r], decode(cur))
				cur = nil
			}
		}
		if cur != nil {
			out[r] = append(out[r], decode(cur))
		}
	}
	return out
}

// Preference records render with the run's chat template, chosen in the
// even rows and rejected in the odd ones; only the final reply counts,
// not the shared conversation's earlier assistant turn; string records
// render as prompt and completion.
func TestLoadPairRowsWithTemplate(t *testing.T) {
	tok := tokentest.NewBytes("<|endoftext|>", "<|endoftext|>", "<|im_start|>", "<|im_end|>")
	src, err := os.ReadFile(filepath.Join("..", "data", "chattemplate", "testdata", "smollm2.jinja"))
	if err != nil {
		t.Fatal(err)
	}
	run := t.TempDir()
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
	jsonl := filepath.Join(t.TempDir(), "pref.jsonl")
	conv := func(last string) string {
		return `[{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": "Bye"}, {"role": "assistant", "content": "` + last + `"}]`
	}
	lines := `{"chosen": ` + conv("Farewell.") + `, "rejected": ` + conv("Go.") + `}
{"prompt": "Q:", "chosen": " yes", "rejected": " no"}
`
	if err := os.WriteFile(jsonl, []byte(lines), 0o644); err != nil {
		t.Fatal(err)
	}
	rows, err := LoadPairRows(jsonl, tok, tmpl, 256)
	if err != nil {
		t.Fatal(err)
	}
	if !rows.Pairs || rows.Len() != 4 {
		t.Fatalf("%d rows (pairs %v), want 4 rows of pairs", rows.Len(), rows.Pairs)
	}
	got := countedSpans(rows, tok.Decode)
	want := [][]string{{"Farewell.<|im_end|>"}, {"Go.<|im_end|>"}, {" yes<|endoftext|>"}, {" no<|endoftext|>"}}
	for r := range want {
		if !slices.Equal(got[r], want[r]) {
			t.Errorf("row %d counts %q, want %q", r, got[r], want[r])
		}
	}
	if !strings.Contains(tok.Decode(rows.X[:rows.T]), "Hello!") {
		t.Errorf("row 0 %q lacks the shared conversation", tok.Decode(rows.X[:rows.T]))
	}
	bad := filepath.Join(t.TempDir(), "bad.jsonl")
	os.WriteFile(bad, []byte(lines+`{"prompt": "Q:", "chosen": " yes"}`+"\n"), 0o644)
	if _, err := LoadPairRows(bad, tok, tmpl, 256); err == nil || !strings.Contains(err.Error(), "bad.jsonl:3:") {
		t.Errorf("bad record: %v, want an error naming bad.jsonl:3", err)
	}
}
