package rl

import (
	"context"
	"math"
	"strings"
	"testing"

	"github.com/posttrainllm/posttrainllm/generate"
	"github.com/posttrainllm/posttrainllm/internal/tokentest"
	"github.com/posttrainllm/posttrainllm/mlx"
	"github.com/posttrainllm/posttrainllm/model"
)

// Collect turns prompts into an update: groups of completions rendered
// through the chat format, scored by a Go reward and the length penalty,
// advantages normalised within each group, and rows the step can take.
func TestCollectScoresAndNormalisesGroups(t *testing.T) {
	tok := tokentest.NewBytes("<|endoftext|>", "<|endoftext|>", "<|im_start|>", "<|im_end|>")
	net, err := model.New(model.Config{VocabSize: tok.VocabSize(), DModel: 32, Layers: 2, Heads: 2, Context: 128, InitStd: 0.3})
	if err != nil {
		t.Fatal(err)
	}
	params, err := net.Init(4)
	if err != nil {
		t.Fatal(err)
	}
	m := generate.NewModel(net, params, tok, nil, []int32{tok.EOT()}, func() { mlx.Free(params...) })
	defer m.Close()
	e, err := m.NewEngine(generate.EngineOptions{MaxBatch: 16})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	vowels := FromFunc("vowels", func(_ context.Context, _ Prompt, c Completion) (float64, error) {
		return float64(strings.Count(c.Text, "a") + strings.Count(c.Text, "e")), nil
	})
	prompts := []Prompt{{Text: "Say a word."}, {Text: "Another one?"}, {Text: "x"}}
	opts := UpdateOptions{Rollout: RolloutOptions{GroupSize: 4, MaxCompletion: 12, Temperature: 1.5, Seed: 1},
		Rewards: []Weighted{{Scorer: vowels, Weight: 1}, {Scorer: Length(12), Weight: 0.5}}, Scale: ScaleGroup, T: 64}
	u, err := Collect(context.Background(), e, m, prompts, opts, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(u.Groups) != 3 || u.Rows.N != 12 || len(u.Advantages) != 12 || len(u.Scores.Each["vowels"]) != 12 {
		t.Fatalf("%d groups, %d rows, %d advantages, scores %v", len(u.Groups), u.Rows.N, len(u.Advantages), u.Scores.Each)
	}
	for g := range 3 {
		sum := 0.0
		for k := range 4 {
			i := 4*g + k
			sum += u.Advantages[i]
			want := u.Scores.Each["vowels"][i] + 0.5*u.Scores.Each["length"][i]
			if math.Abs(u.Scores.Total[i]-want) > 1e-12 {
				t.Fatalf("completion %d: total %g, want %g", i, u.Scores.Total[i], want)
			}
			s := u.Groups[g].Samples[k]
			if got := -float64(s.Generated) / 12; u.Scores.Each["length"][i] != got {
				t.Fatalf("completion %d: length reward %g for %d tokens", i, u.Scores.Each["length"][i], s.Generated)
			}
		}
		if math.Abs(sum) > 1e-9 {
			t.Fatalf("group %d's advantages add up to %g, want 0", g, sum)
		}
	}
	st := u.Stats
	if st.LengthMax > 12 || st.LengthMean <= 0 || st.LengthMean > float64(st.LengthMax) || st.Rollout <= 0 || st.AdvantageStd <= 0 ||
		math.Abs(st.Rewards["length"]+st.LengthMean/12) > 1e-9 {
		t.Fatalf("stats %+v", st)
	}
	opts.T = 10
	if _, err := Collect(context.Background(), e, m, prompts, opts, 0); err == nil || !strings.Contains(err.Error(), "does not fit") {
		t.Fatalf("rows of 10: %v", err)
	}
}
