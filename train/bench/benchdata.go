package bench

import (
	"fmt"
	"math/rand/v2"

	"github.com/posttrainllm/posttrainllm/data"
	"github.com/posttrainllm/posttrainllm/pretrain"
	"github.com/posttrainllm/posttrainllm/train"
)

// benchData returns the view Run samples windows from and names it.
func benchData(cfg train.Config, ds *pretrain.Dataset) (data.View, string, error) {
	if ds != nil {
		if ds.Tokenizer.VocabSize() > cfg.Model.VocabSize {
			return data.View{}, "", fmt.Errorf("bench: the %s tokenizer's %d ids do not fit vocab_size %d",
				ds.Tokenizer.Name(), ds.Tokenizer.VocabSize(), cfg.Model.VocabSize)
		}
		name := cfg.Corpus
		if ds.Corpus != nil && ds.Corpus.Root != "" {
			name = ds.Corpus.Root
		}
		return ds.Train, name, nil
	}
	return data.NewTokens(syntheticStream(cfg.Model.VocabSize, max(syntheticTokens, 2*(cfg.Model.Context+1)), cfg.Seed)).All(),
		"synthetic", nil
}

// syntheticSuccessors is how many next tokens each token of the synthetic
// stream chooses among, so a model can learn it down to ln 4 nats.
const syntheticSuccessors = 4

// syntheticStream returns n seeded random tokens below vocab drawn from a
// random first-order Markov chain in which every token has
// syntheticSuccessors equally likely successors: random, yet learnable, so a
// bench's falling loss shows that the steps train.
func syntheticStream(vocab, n int, seed uint64) []int32 {
	rng := rand.New(rand.NewPCG(seed, 0x62656e6368)) // "bench"
	next := make([]int32, vocab*syntheticSuccessors)
	for i := range next {
		next[i] = int32(rng.IntN(vocab))
	}
	ids := make([]int32, n)
	ids[0] = int32(rng.IntN(vocab))
	for i := 1; i < n; i++ {
		ids[i] = next[int(ids[i-1])*syntheticSuccessors+rng.IntN(syntheticSuccessors)]
	}
	return ids
}
