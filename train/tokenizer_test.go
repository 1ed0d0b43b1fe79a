package train

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/posttrainllm/posttrainllm/checkpoint"
	"github.com/posttrainllm/posttrainllm/data"
)

// namedTokenizer is the byte tokenizer under another name and vocabulary
// size, standing in for a tokenizer.json read by a TokenizerOpener.
type namedTokenizer struct {
	data.Tokenizer
	name  string
	vocab int
}

func (n namedTokenizer) Name() string   { return n.name }
func (n namedTokenizer) VocabSize() int { return n.vocab }

// OpenTokenizer builds package data's tokenizers by name and leaves the hf
// tokenizer to the opener, after checking that the run has the file it
// reads; the result must be the tokenizer the config names with ids the
// model embeds.
func TestOpenTokenizer(t *testing.T) {
	byteTok, err := data.NewTokenizer("byte")
	if err != nil {
		t.Fatal(err)
	}
	if tok, err := OpenTokenizer(nil, "byte", ""); err != nil || tok.Name() != "byte" {
		t.Fatalf("OpenTokenizer(nil, byte) = %v, %v; want the byte tokenizer", tok, err)
	}
	if _, err := OpenTokenizer(nil, "bpe", ""); err == nil || !strings.Contains(err.Error(), `"bpe"`) {
		t.Fatalf("OpenTokenizer(nil, bpe) error %v, want one naming the unknown tokenizer", err)
	}

	run := t.TempDir()
	var opened []string
	open := func(name, runDir string) (data.Tokenizer, error) {
		opened = append(opened, runDir)
		return namedTokenizer{byteTok, "hf-0123456789abcdef", 300}, nil
	}
	_, err = OpenTokenizer(open, HFTokenizer, run)
	if err == nil || !strings.Contains(err.Error(), HFTokenizerPath(run)) {
		t.Fatalf("hf tokenizer of a run without %s: error %v, want one naming the path", HFTokenizerPath(run), err)
	}
	if len(opened) != 0 {
		t.Fatalf("the opener was called for a missing file (%v)", opened)
	}
	if err := os.MkdirAll(filepath.Join(run, TokenizerDir), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(HFTokenizerPath(run), []byte(`{}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenTokenizer(nil, HFTokenizer, run); err == nil || !strings.Contains(err.Error(), "TokenizerOpener") {
		t.Fatalf("hf tokenizer without an opener: error %v, want one asking for a TokenizerOpener", err)
	}
	tok, err := OpenTokenizer(open, HFTokenizer, run)
	if err != nil || len(opened) != 1 || opened[0] != run {
		t.Fatalf("OpenTokenizer(open, hf, %s) = %v, %v, opener called for %v", run, tok, err, opened)
	}

	cfg := Config{Tokenizer: HFTokenizer}
	cfg.Model.VocabSize = 300
	if err := CheckTokenizer(tok, cfg); err != nil {
		t.Fatalf("CheckTokenizer of the hf tokenizer: %v", err)
	}
	cfg.Model.VocabSize = 299
	if err := CheckTokenizer(tok, cfg); err == nil || !strings.Contains(err.Error(), "vocab_size is 299") {
		t.Fatalf("CheckTokenizer of 300 ids for a 299-id model: %v, want an error naming the vocab_size", err)
	}
	cfg.Model.VocabSize = 300
	if err := CheckTokenizer(byteTok, cfg); err == nil {
		t.Fatal("CheckTokenizer accepted the byte tokenizer for a config naming hf")
	}
}

// A run made from another one gets its tokenizer files, once: files the
// destination already has are kept.
func TestCopyTokenizerDir(t *testing.T) {
	from, to := t.TempDir(), t.TempDir()
	if got := checkpoint.RunDirOf(filepath.Join(from, "checkpoints", "step-00000007")); got != from {
		t.Fatalf("checkpoint.RunDirOf = %s, want %s", got, from)
	}
	if err := CopyTokenizerDir(from, to); err != nil {
		t.Fatalf("copying from a run without tokenizer files: %v", err)
	}
	if _, err := os.Stat(filepath.Join(to, TokenizerDir)); err == nil {
		t.Fatal("copying from a run without tokenizer files made the folder")
	}
	if err := os.MkdirAll(filepath.Join(from, TokenizerDir), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(HFTokenizerPath(from), []byte(`{"a":1}`), 0o644); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := CopyTokenizerDir(from, to); err != nil {
			t.Fatal(err)
		}
	}
	if b, err := os.ReadFile(HFTokenizerPath(to)); err != nil || string(b) != `{"a":1}` {
		t.Fatalf("copied tokenizer.json = %q, %v; want the source's", b, err)
	}
}
