package pretrain

import (
	"testing"

	"github.com/posttrainllm/posttrainllm/internal/runtest/fixture"
)

// memoryDataset tokenises text with the byte tokenizer, in memory.
func memoryDataset(t testing.TB, text string, context int) *Dataset {
	t.Helper()
	return tokenizedDataset(t, "byte", text, context)
}

// tokenizedDataset tokenises text with the named tokenizer, in memory.
func tokenizedDataset(t testing.TB, tokenizer, text string, context int) *Dataset {
	t.Helper()
	tok, tokens, tr, val := fixture.SplitText(t, tokenizer, text, context)
	return &Dataset{Tokenizer: tok, Tokens: tokens, Train: tr, Val: val}
}
