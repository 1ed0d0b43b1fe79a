package runfolder

import (
	"slices"
	"testing"

	"github.com/posttrainllm/posttrainllm/generate"
	"github.com/posttrainllm/posttrainllm/model"
)

// TestGenerateWithPaddedVocabulary samples from a fresh model whose 61-token
// vocabulary is padded to 64 rows: at temperature 1 a near-uniform model
// would pick one of the 3 padding ids about once in 21 draws, so 200 tokens
// all below 61 show the padding is never sampled. The same seed gives the
// same tokens; the prompt is kept.
func TestGenerateWithPaddedVocabulary(t *testing.T) {
	m, err := model.New(model.Config{VocabSize: 61, PadVocabTo: 32, DModel: 32, Layers: 1, Heads: 2, Context: 16})
	if err != nil {
		t.Fatal(err)
	}
	params, err := m.Init(5)
	if err != nil {
		t.Fatal(err)
	}
	prompt := []int32{1, 2, 3}
	for _, s := range []generate.Sampling{
		{MaxTokens: 200, Temperature: 1, Seed: 9},
		{MaxTokens: 20, Temperature: 0},
		{MaxTokens: 50, Temperature: 1, TopK: 5, Seed: 3},
	} {
		opts := SampleOptions{Options: generate.Options{Sampling: s}}
		out, err := Generate(m, params, prompt, opts)
		if err != nil {
			t.Fatal(err)
		}
		if len(out) != len(prompt)+opts.MaxTokens || !slices.Equal(out[:3], prompt) {
			t.Fatalf("%+v: generated %d tokens starting %v", opts, len(out), out[:3])
		}
		for i, id := range out {
			if id < 0 || id >= 61 {
				t.Fatalf("%+v: token %d is id %d, outside the vocabulary [0, 61)", opts, i, id)
			}
		}
		again, err := Generate(m, params, prompt, opts)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(out, again) {
			t.Fatalf("%+v: the same seed sampled different tokens", opts)
		}
	}
}
