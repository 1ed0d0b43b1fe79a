package hftokenizer

import "testing"

// BenchmarkEncodeShakespeare encodes the whole of tinyshakespeare with the
// real SmolLM2 tokenizer, freshly loaded each time (outside the timing),
// so that no word is cached from an earlier iteration.
func BenchmarkEncodeShakespeare(b *testing.B) {
	path := smolLM2TokenizerJSON(b)
	text := shakespeare(b)
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		b.StopTimer()
		tok, err := Load(path)
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		if len(tok.Encode(text)) == 0 {
			b.Fatal("no ids")
		}
	}
}
