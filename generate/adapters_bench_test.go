package generate

import (
	"context"
	"testing"
	"time"

	"github.com/posttrainllm/posttrainllm/model"
	"github.com/posttrainllm/posttrainllm/peft"
)

// BenchmarkEngineAdapters times batches of 8 greedy rows of 64 tokens on
// a model of 4 layers of width 512: base rows alone ("base"), rows of two
// LoRA adapters on the attention (ranks 16 and 8, "lora"), half base and
// half adapter rows in one batch ("mixed"), rows of a rank-16 DoRA adapter
// on the attention ("dora") and of a rank-16 LoRA adapter on every
// projection ("lora-all"), then base rows again ("base-again": a control,
// whose rate over the first base batches' shows how much the machine
// moved). Each iteration runs one batch of every case in turn, so the
// cases share the machine's state; it reports the base rows' decoded
// tokens per second and each case's rate over the base's
// (docs/performance/generation.md). The four adapters are registered
// together, so every adapter step stacks all of them (ranks 56, padded
// to 64 columns, over every projection).
func BenchmarkEngineAdapters(b *testing.B) {
	cfg := model.Config{VocabSize: 4096, DModel: 512, Layers: 4, Heads: 8, KVHeads: 4, Context: 256, MLP: "swiglu", InitStd: 0.02}
	net, params := engineNet(b, cfg)
	e := newEngine(b, net, params, EngineOptions{MaxBatch: 8})
	for name, c := range map[string]peft.Config{
		"x":   {Method: peft.LoRA, Rank: 16, Alpha: 32, Targets: []string{"attn"}},
		"y":   {Method: peft.LoRA, Rank: 8, Alpha: 16, Targets: []string{"attn"}},
		"all": {Method: peft.LoRA, Rank: 16, Alpha: 32, Targets: []string{"all"}},
		"d":   {Method: peft.DoRA, Rank: 16, Alpha: 32, Targets: []string{"attn"}},
	} {
		if err := e.SetAdapter(name, testAdapter(b, net, params, c, 1)); err != nil {
			b.Fatal(err)
		}
	}
	cases := []struct {
		name string
		rows []string
	}{
		{"base", []string{"", "", "", "", "", "", "", ""}},
		{"lora", []string{"x", "y", "x", "y", "x", "y", "x", "y"}},
		{"mixed", []string{"", "x", "", "y", "", "x", "", "y"}},
		{"dora", []string{"d", "d", "d", "d", "d", "d", "d", "d"}},
		{"lora-all", []string{"all", "all", "all", "all", "all", "all", "all", "all"}},
		{"base-again", []string{"", "", "", "", "", "", "", ""}},
	}
	batch := func(rows []string) {
		var streams []*Stream
		for i, a := range rows {
			prompt := []int32{int32(1 + i), 17, 300, int32(40 * i), 9, 5, 77, 1000}
			s, err := e.Submit(context.Background(), Sequence{Prompt: prompt, Options: Options{Sampling: Sampling{MaxTokens: 64}}, Adapter: a})
			if err != nil {
				b.Fatal(err)
			}
			streams = append(streams, s...)
		}
		for _, s := range streams {
			if _, err := s.Wait(); err != nil {
				b.Fatal(err)
			}
		}
	}
	// Three untimed rounds: each case traces its steps in the first, and
	// on the CPU the rounds after it still ran slower in a fresh process.
	for range 3 {
		for _, c := range cases {
			batch(c.rows)
		}
	}
	rates := make([]time.Duration, len(cases))
	tokens := make([]int64, len(cases))
	for b.Loop() {
		for i, c := range cases {
			decoded, start := e.Stats().Decoded, time.Now()
			batch(c.rows)
			rates[i] += time.Since(start)
			tokens[i] += e.Stats().Decoded - decoded
		}
	}
	rate := func(i int) float64 { return float64(tokens[i]) / rates[i].Seconds() }
	b.ReportMetric(rate(0), "base-tokens/s")
	for i, c := range cases[1:] {
		b.ReportMetric(rate(i+1)/rate(0), c.name+"/base")
	}
}
