package runfolder

import (
	"slices"
	"testing"

	"github.com/posttrainllm/posttrainllm/internal/tokentest"
)

// Special tokens written in a prompt become their ids unless
// SpecialsAsText; an empty prompt is the end-of-text token.
func TestEncodePromptSpecials(t *testing.T) {
	tok := tokentest.NewBytes("<|endoftext|>", "<|endoftext|>", "<|im_start|>")
	const prompt = "<|im_start|>user"
	if got := encodePrompt(tok, prompt, SampleOptions{}); !slices.Equal(got, append([]int32{257}, tok.Encode("user")...)) {
		t.Fatalf("specials as ids: %v", got)
	}
	if got := encodePrompt(tok, prompt, SampleOptions{SpecialsAsText: true}); !slices.Equal(got, tok.Encode(prompt)) {
		t.Fatalf("specials as text: %v", got)
	}
	if got := encodePrompt(tok, "", SampleOptions{}); !slices.Equal(got, []int32{tok.EOT()}) {
		t.Fatalf("empty prompt: %v", got)
	}
}
