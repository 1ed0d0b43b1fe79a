package rl

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/posttrainllm/posttrainllm/data"
	"github.com/posttrainllm/posttrainllm/generate"
)

// UpdateOptions are how one GRPO update's data are collected.
type UpdateOptions struct {
	Rollout RolloutOptions
	Rewards []Weighted
	Scale   Scale
	// T is the rows' length (prompt and completion: at least the longest
	// prompt plus the completion budget).
	T int
	// MaskTruncated leaves completions that used their whole budget out
	// of the loss (DAPO's overlong filtering).
	MaskTruncated bool
}

// Update is one update's data: its groups, their rewards and advantages,
// the rows the step trains on, and what the update's metrics report.
type Update struct {
	Groups     []Group
	Scores     Scores
	Advantages []float64
	Rows       Rows
	Stats      UpdateStats
}

// UpdateStats are an update's rollout metrics.
type UpdateStats struct {
	RewardMean, RewardStd float64
	// Rewards are each reward's mean, by name.
	Rewards                  map[string]float64
	AdvantageStd             float64
	LengthMean               float64 // completion tokens generated, end token excluded
	LengthMax                int
	TruncatedFraction        float64 // completions that used their whole budget
	Rollout, Scoring         time.Duration
	GeneratedTokensPerSecond float64
}

// RenderPrompt returns the ids generation starts from for p: its messages,
// or its text as one user message, through m's chat template (the
// built-in one without).
func RenderPrompt(m *generate.Model, p Prompt) ([]int32, error) {
	msgs := p.Messages
	if len(msgs) == 0 {
		msgs = []data.Message{{Role: "user", Content: p.Text}}
	}
	return m.ChatPrompt(msgs)
}

// Collect draws the update's completions of prompts from engine e (m's
// tokenizer, template and end tokens), scores them, and lays them out as
// rows with their advantages: everything a GRPO step needs but its
// parameters. step seeds the rollout (RolloutOptions.Seed).
func Collect(ctx context.Context, e *generate.Engine, m *generate.Model, prompts []Prompt, opts UpdateOptions, step int) (Update, error) {
	ids := make([][]int32, len(prompts))
	for i, p := range prompts {
		var err error
		if ids[i], err = RenderPrompt(m, p); err != nil {
			return Update{}, fmt.Errorf("rl: prompt %d: %w", i, err)
		}
		if len(ids[i])+opts.Rollout.MaxCompletion > opts.T+1 {
			return Update{}, fmt.Errorf("rl: prompt %d is %d tokens: with the completion budget of %d it does not fit rows of %d", i, len(ids[i]), opts.Rollout.MaxCompletion, opts.T)
		}
	}
	start := time.Now()
	groups, err := Rollout(ctx, e, ids, m.EndTokens, opts.Rollout, step)
	if err != nil {
		return Update{}, err
	}
	u := Update{Groups: groups}
	u.Stats.Rollout = time.Since(start)
	var items []Item
	generated := 0
	for i, g := range groups {
		for _, s := range g.Samples {
			c := Completion{Text: m.Tokenizer.Decode(s.Tokens[:s.Generated]), Tokens: s.Generated, Truncated: s.Truncated}
			items = append(items, Item{Prompt: prompts[i], Completion: c})
			generated += s.Generated
			u.Stats.LengthMax = max(u.Stats.LengthMax, s.Generated)
			if s.Truncated {
				u.Stats.TruncatedFraction++
			}
		}
	}
	n := float64(len(items))
	u.Stats.LengthMean, u.Stats.TruncatedFraction = float64(generated)/n, u.Stats.TruncatedFraction/n
	u.Stats.GeneratedTokensPerSecond = float64(generated) / u.Stats.Rollout.Seconds()
	start = time.Now()
	if u.Scores, err = Score(ctx, opts.Rewards, items); err != nil {
		return Update{}, err
	}
	u.Stats.Scoring = time.Since(start)
	if u.Advantages, err = GroupAdvantages(u.Scores.Total, opts.Rollout.GroupSize, opts.Scale); err != nil {
		return Update{}, err
	}
	if u.Rows, err = LayRows(groups, opts.T, opts.MaskTruncated); err != nil {
		return Update{}, err
	}
	u.Stats.RewardMean, u.Stats.RewardStd = meanStd(u.Scores.Total)
	_, u.Stats.AdvantageStd = meanStd(u.Advantages)
	u.Stats.Rewards = make(map[string]float64, len(u.Scores.Each))
	for name, v := range u.Scores.Each {
		u.Stats.Rewards[name], _ = meanStd(v)
	}
	return u, nil
}

// meanStd is xs' mean and population standard deviation.
func meanStd(xs []float64) (float64, float64) {
	m := mean(xs)
	v := 0.0
	for _, x := range xs {
		v += (x - m) * (x - m)
	}
	return m, math.Sqrt(v / float64(len(xs)))
}
