package hftokenizer

import (
	"os"
	"path/filepath"
	"testing"
)

// BenchmarkEncodeShakespeare encodes the whole of tinyshakespeare with the
// real SmolLM2 tokenizer, freshly loaded each time (outside the timing),
// so that no word is cached from an earlier iteration.
func BenchmarkEncodeShakespeare(b *testing.B) {
	path, err := filepath.Abs(filepath.Join("..", "..", ".deps", "models", "SmolLM2-135M-Instruct", "tokenizer.json"))
	if err != nil {
		b.Fatal(err)
	}
	text, err := os.ReadFile(filepath.Join("..", "..", "..", "shared", "data", "tinyshakespeare.txt"))
	if err != nil {
		b.Fatalf("the shared training text is missing: %v", err)
	}
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		b.StopTimer()
		tok, err := Load(path)
		if err != nil {
			b.Fatalf("%v (run make real-model)", err)
		}
		b.StartTimer()
		if len(tok.Encode(string(text))) == 0 {
			b.Fatal("no ids")
		}
	}
}
