package rl

import (
	"context"
	"math"
	"slices"
	"testing"

	"github.com/posttrainllm/posttrainllm/generate"
	"github.com/posttrainllm/posttrainllm/mlx"
	"github.com/posttrainllm/posttrainllm/model"
)

func rolloutEngine(t *testing.T) (*model.Transformer, []*mlx.Array, *generate.Engine) {
	t.Helper()
	net, err := model.New(model.Config{VocabSize: 64, DModel: 32, Layers: 2, Heads: 4, KVHeads: 2, Context: 64, MLP: "swiglu", InitStd: 0.5})
	if err != nil {
		t.Fatal(err)
	}
	params, err := net.Init(3)
	if err != nil {
		t.Fatal(err)
	}
	e, err := generate.NewEngine(net, params, generate.EngineOptions{MaxBatch: 8})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close(); mlx.Free(params...) })
	return net, params, e
}

// A rollout draws a group per prompt, reproducibly from the seed and
// step; its rows hold each completion after its prompt, and the
// log-probabilities the engine reported are the model's over the row,
// the prompt in context: the ratio of GRPO's first iteration is 1.
func TestRolloutRowsCarryTheSamplingLogprobs(t *testing.T) {
	net, params, e := rolloutEngine(t)
	prompts := [][]int32{{1, 2, 3}, {9, 8, 7, 6, 5, 4}, {33}}
	opts := RolloutOptions{GroupSize: 4, MaxCompletion: 10, Temperature: 1, Seed: 5}
	stops := []int32{0}
	groups, err := Rollout(context.Background(), e, prompts, stops, opts, 7)
	if err != nil {
		t.Fatal(err)
	}
	again, err := Rollout(context.Background(), e, prompts, stops, opts, 7)
	if err != nil {
		t.Fatal(err)
	}
	next, err := Rollout(context.Background(), e, prompts, stops, opts, 8)
	if err != nil {
		t.Fatal(err)
	}
	stopped, truncated := 0, 0
	for i, g := range groups {
		if len(g.Samples) != 4 || !slices.Equal(g.Prompt, prompts[i]) {
			t.Fatalf("group %d: %d samples for prompt %v", i, len(g.Samples), g.Prompt)
		}
		for k, s := range g.Samples {
			if !slices.Equal(s.Tokens, again[i].Samples[k].Tokens) {
				t.Fatalf("group %d sample %d: %v, then %v with the same seed and step", i, k, s.Tokens, again[i].Samples[k].Tokens)
			}
			if len(s.Tokens) != len(s.Logprobs) || s.Truncated != (s.Generated == 10) {
				t.Fatalf("group %d sample %d: %+v", i, k, s)
			}
			if s.Truncated {
				truncated++
			} else {
				stopped++
				if s.Tokens[len(s.Tokens)-1] != 0 || len(s.Tokens) != s.Generated+1 {
					t.Fatalf("group %d sample %d stopped without its end token: %v", i, k, s.Tokens)
				}
			}
		}
		if slices.Equal(g.Samples[0].Tokens, g.Samples[1].Tokens) && slices.Equal(g.Samples[1].Tokens, g.Samples[2].Tokens) {
			t.Fatalf("group %d: the completions are the same", i)
		}
	}
	if slices.EqualFunc(groups[0].Samples, next[0].Samples, func(a, b Sample) bool { return slices.Equal(a.Tokens, b.Tokens) }) {
		t.Fatal("the next update drew the same completions")
	}
	if stopped == 0 || truncated == 0 {
		t.Fatalf("%d stopped and %d truncated completions: the case tests only one kind", stopped, truncated)
	}
	const T = 20
	rows, err := LayRows(groups, T, false)
	if err != nil {
		t.Fatal(err)
	}
	mlx.Do(func() error {
		ce, _ := net.LossTerms(params, mlx.FromSlice(rows.X, rows.N, T), mlx.FromSlice(rows.Y, rows.N, T))
		got, err := mlx.AsType(ce, mlx.Float32).Float32s()
		if err != nil {
			t.Fatal(err)
		}
		masked := 0
		for j, m := range rows.Mask {
			if m == 0 {
				continue
			}
			masked++
			if math.Abs(float64(-got[j]-rows.Old[j])) > 1e-4 {
				t.Fatalf("row %d position %d: the step's log-probability %.6f, the engine's %.6f", j/T, j%T, -got[j], rows.Old[j])
			}
		}
		want := 0
		for _, g := range groups {
			for _, s := range g.Samples {
				want += len(s.Tokens)
			}
		}
		if masked != want {
			t.Fatalf("%d masked targets, %d completion tokens", masked, want)
		}
		return nil
	})
	masked, err := LayRows(groups, T, true)
	if err != nil {
		t.Fatal(err)
	}
	for r := range masked.N {
		s := groups[r/4].Samples[r%4]
		if s.Truncated && slices.ContainsFunc(masked.Mask[r*T:(r+1)*T], func(m float32) bool { return m != 0 }) {
			t.Fatalf("row %d is truncated but trained on", r)
		}
	}
	if _, err := LayRows(groups, 5, false); err == nil {
		t.Fatal("rows of 5 positions took completions of up to 16 tokens")
	}
}
