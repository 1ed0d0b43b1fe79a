package data

import "fmt"

// codecEncode encodes text with the tiktoken-go codec itself, the
// reference the faster encoding is tested against.
func (g *gpt2Tokenizer) codecEncode(text string) []int32 {
	raw, _, err := g.codec.Encode(text)
	if err != nil {
		panic(fmt.Sprintf("data: gpt2 codec failed on a %d-byte text: %v", len(text), err))
	}
	ids := make([]int32, len(raw))
	for i, id := range raw {
		ids[i] = int32(id)
	}
	return ids
}
