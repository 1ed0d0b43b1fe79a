package pretrain

import (
	"strings"
	"testing"

	"github.com/posttrainllm/posttrainllm/data"
	"github.com/posttrainllm/posttrainllm/model"
	"github.com/posttrainllm/posttrainllm/step"
	"github.com/posttrainllm/posttrainllm/train"
)

// syntheticText is deterministic, learnable text: repeated phrases with
// some variety, enough for a tiny model's loss to fall quickly (train's
// tests have the same).
func syntheticText(n int) string {
	words := []string{"the", "quick", "brown", "fox", "jumps", "over", "a", "lazy", "dog", "and", "runs", "home"}
	var b strings.Builder
	for i := 0; b.Len() < n; i++ {
		b.WriteString(words[(i*7+i/5)%len(words)])
		if i%9 == 8 {
			b.WriteString(".\n")
		} else {
			b.WriteByte(' ')
		}
	}
	return b.String()
}

// memoryDataset tokenises text with the byte tokenizer, in memory.
func memoryDataset(t testing.TB, text string, context int) *Dataset {
	t.Helper()
	return tokenizedDataset(t, "byte", text, context)
}

// tokenizedDataset tokenises text with the named tokenizer, in memory.
func tokenizedDataset(t testing.TB, tokenizer, text string, context int) *Dataset {
	t.Helper()
	tok, err := data.NewTokenizer(tokenizer)
	if err != nil {
		t.Fatal(err)
	}
	tokens := data.NewTokens(tok.Encode(text))
	tr, val, err := data.Split(tokens, 0.1, context)
	if err != nil {
		t.Fatal(err)
	}
	return &Dataset{Tokenizer: tok, Tokens: tokens, Train: tr, Val: val}
}

// tinyConfig is a run small enough for unit tests on two CPU cores (train's
// tests have the same).
func tinyConfig() train.Config {
	return train.Config{
		Model:     model.Config{VocabSize: 256, DModel: 32, Layers: 2, Heads: 2, Context: 32},
		Tokenizer: "byte",
		Steps:     20, Batch: 4, Accum: 1,
		Optimizer: "adamw", Schedule: "cosine", LR: 3e-3, MinLR: 3e-4, Warmup: 5,
		GradClip: 1, Compile: true, Device: "cpu", Seed: 1,
		LogEvery: 1, EvalTokens: 256, // 2 batches
	}
}

// preparedSetup prepares cfg and returns a fresh setup of it, its model
// and the prepared config; the setup is freed when the test ends.
func preparedSetup(t testing.TB, cfg train.Config) (*train.Setup, *model.Transformer, train.Config) {
	t.Helper()
	cfg, m, err := train.Prepare(cfg)
	if err != nil {
		t.Fatal(err)
	}
	s, err := train.NewSetup(cfg, m, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Free)
	return s, m, cfg
}

// setupLosses runs cfg.Steps updates of a fresh setup of cfg on windows of
// ds drawn with cfg.Seed, following cfg's schedule, and returns their
// losses and how often the step was traced.
func setupLosses(t testing.TB, cfg train.Config, ds *Dataset) (losses []float64, traces int) {
	t.Helper()
	s, _, cfg := preparedSetup(t, cfg)
	defer s.Free() // now, not when the test ends (freeing twice is a no-op)
	sampler, err := data.NewSampler(ds.Train, cfg.Model.Context, cfg.Seed)
	if err != nil {
		t.Fatal(err)
	}
	batch, err := s.Plan.NewBatch(cfg.Model.Context)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < cfg.Steps; i++ {
		if err := sampler.FillBatch(batch); err != nil {
			t.Fatal(err)
		}
		loss, err := s.State.Update(s.Schedule.LR(i), step.BatchOf(batch))
		if err != nil {
			t.Fatalf("update %d: %v", i+1, err)
		}
		losses = append(losses, loss)
	}
	return losses, s.Step.Traces()
}
