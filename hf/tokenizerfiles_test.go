package hf

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// FindTokenizerFiles finds what import keeps with a run: the tokenizer,
// the chat template in either file, and generation_config.json's end
// tokens; the model's own files are not among them.
func TestFindTokenizerFiles(t *testing.T) {
	dir := t.TempDir()
	names := []string{"tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "generation_config.json", "config.json", "model.safetensors"}
	for _, n := range names {
		if err := os.WriteFile(filepath.Join(dir, n), []byte("{}"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	files, err := FindTokenizerFiles(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range files {
		got = append(got, filepath.Base(f))
	}
	slices.Sort(got)
	want := []string{"chat_template.jinja", "generation_config.json", "tokenizer.json", "tokenizer_config.json"}
	if !slices.Equal(got, want) {
		t.Fatalf("found %v, want %v", got, want)
	}
}
