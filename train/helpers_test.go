package train

import (
	"testing"

	"github.com/posttrainllm/posttrainllm/data"
	"github.com/posttrainllm/posttrainllm/internal/runtest/fixture"
	"github.com/posttrainllm/posttrainllm/mlx"
	"github.com/posttrainllm/posttrainllm/model"
	"github.com/posttrainllm/posttrainllm/step"
)

// testData is a tokenised text split into training and held-out views:
// what pretrain.Dataset holds, for the tests of the loop's parts.
type testData struct {
	Tokenizer  data.Tokenizer
	Tokens     *data.Tokens
	Train, Val data.View
}

// memoryDataset tokenises text with the byte tokenizer, in memory.
func memoryDataset(t testing.TB, text string, context int) *testData {
	t.Helper()
	return tokenizedDataset(t, "byte", text, context)
}

// tokenizedDataset tokenises text with the named tokenizer, in memory.
func tokenizedDataset(t testing.TB, tokenizer, text string, context int) *testData {
	t.Helper()
	tok, tokens, tr, val := fixture.SplitText(t, tokenizer, text, context)
	return &testData{Tokenizer: tok, Tokens: tokens, Train: tr, Val: val}
}

// tinyConfig is a run small enough for unit tests on two CPU cores:
// internal/runtest's TinyConfig, which this package's tests cannot import
// (runtest imports train).
func tinyConfig() Config {
	return Config{
		Model:     model.Config{VocabSize: 256, DModel: 32, Layers: 2, Heads: 2, Context: 32},
		Tokenizer: "byte",
		Steps:     20, Batch: 4, Accum: 1,
		Optimizer: "adamw", Schedule: "cosine", LR: 3e-3, MinLR: 3e-4, Warmup: 5,
		GradClip: 1, Compile: true, Device: "cpu", Seed: 1,
		LogEvery: 1, EvalTokens: 256, // 2 batches
	}
}

// setupLosses runs cfg.Steps updates of a fresh setup of cfg on windows of
// ds drawn with cfg.Seed, following cfg's schedule, and returns their
// losses and how often the step was traced.
func setupLosses(t testing.TB, cfg Config, ds *testData) (losses []float64, traces int) {
	t.Helper()
	losses, traces, _ = setupRun(t, cfg, ds)
	return losses, traces
}

// runUpdates runs s.Config.Steps updates of s on batches of sampler in the
// plan's shape, following s's schedule, and returns their losses.
func runUpdates(t testing.TB, s *Setup, sampler *data.Sampler) []float64 {
	t.Helper()
	batch, err := s.Plan.NewBatch(s.Config.Model.Context)
	if err != nil {
		t.Fatal(err)
	}
	var losses []float64
	for i := 0; i < s.Config.Steps; i++ {
		if err := sampler.FillBatch(batch); err != nil {
			t.Fatal(err)
		}
		loss, err := s.State.Update(s.Schedule.LR(i), step.BatchOf(batch))
		if err != nil {
			t.Fatalf("update %d: %v", i+1, err)
		}
		losses = append(losses, loss)
	}
	return losses
}

// preparedSetup prepares cfg and returns a fresh setup of it, its model
// and the prepared config; the setup is freed when the test ends.
func preparedSetup(t testing.TB, cfg Config) (*Setup, *model.Transformer, Config) {
	t.Helper()
	cfg, m, err := Prepare(cfg)
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewSetup(cfg, m, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Free)
	return s, m, cfg
}

// setupRun is setupLosses that also returns the final parameters,
// flattened and concatenated in the model's order.
func setupRun(t testing.TB, cfg Config, ds *testData) (losses []float64, traces int, params []float32) {
	t.Helper()
	s, _, cfg := preparedSetup(t, cfg)
	defer s.Free() // now, not when the test ends (freeing twice is a no-op)
	sampler, err := data.NewSampler(ds.Train, cfg.Model.Context, cfg.Seed)
	if err != nil {
		t.Fatal(err)
	}
	losses = runUpdates(t, s, sampler)
	mlx.Do(func() error {
		sc := mlx.NewScope() // frees the casts, reshapes and concatenation
		defer sc.Close()
		flat := make([]*mlx.Array, len(s.State.Params()))
		for i, p := range s.State.Params() {
			flat[i] = mlx.Reshape(mlx.AsType(p, mlx.Float32), -1)
		}
		params, err = mlx.Concatenate(flat, 0).Float32s()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return losses, s.Step.Traces(), params
}
