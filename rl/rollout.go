package rl

import (
	"context"
	"fmt"

	"github.com/posttrainllm/posttrainllm/generate"
)

// RolloutOptions are how an update's completions are drawn.
type RolloutOptions struct {
	// GroupSize is the completions drawn per prompt (GRPO's group).
	GroupSize int
	// MaxCompletion is each completion's budget of tokens.
	MaxCompletion int
	// Temperature, TopK and TopP are the sampling settings.
	Temperature, TopP float64
	TopK              int
	// Seed is the run's; each update and prompt draws from its own stream
	// of it, so a resumed run draws what the first run would have.
	Seed uint64
	// Adapter names the engine's adapter (generate.Engine.SetAdapter) the
	// completions decode through; empty is the engine's base weights. It
	// is how a run draws from the policy it trains, not a setting of the
	// run, and is never saved.
	Adapter string `json:"-"`
}

// Validate reports options that cannot draw completions.
func (o RolloutOptions) Validate() error {
	if o.GroupSize < 2 {
		return fmt.Errorf("group size %d: want at least 2 (advantages compare the completions of a prompt)", o.GroupSize)
	}
	if o.MaxCompletion < 1 {
		return fmt.Errorf("completion budget %d: want at least 1 token", o.MaxCompletion)
	}
	return generate.Sampling{MaxTokens: o.MaxCompletion, Temperature: o.Temperature, TopK: o.TopK, TopP: o.TopP}.Validate()
}

// Sample is one completion of a group.
type Sample struct {
	// Tokens are the completion's, ending with the end token that stopped
	// it, if one did: the policy is trained to stop, too.
	Tokens []int32
	// Logprobs are each token's log-probability under the policy that
	// sampled it (the old log-probabilities of GRPO's ratio).
	Logprobs []float32
	// Generated counts the tokens generated, the end token excluded.
	Generated int
	// Truncated says the completion used its whole budget without an end
	// token.
	Truncated bool
}

// Group is a prompt's completions.
type Group struct {
	Prompt  []int32
	Samples []Sample
}

// Rollout draws opts.GroupSize completions of each prompt (token ids,
// rendered by the caller) from engine e, all of them submitted at once so
// that the engine batches them, each group reading its prompt once.
// stops are the tokens that end a completion (the model's end tokens).
// The completions of update step for prompt i come from seed stream
// (opts.Seed, step, i).
func Rollout(ctx context.Context, e *generate.Engine, prompts [][]int32, stops []int32, opts RolloutOptions, step int) ([]Group, error) {
	if err := opts.Validate(); err != nil {
		return nil, fmt.Errorf("rl: rollout: %w", err)
	}
	streams := make([][]*generate.Stream, len(prompts))
	for i, p := range prompts {
		seq := generate.Sequence{Prompt: p, N: opts.GroupSize, Options: generate.Options{
			Sampling: generate.Sampling{MaxTokens: opts.MaxCompletion, Temperature: opts.Temperature, TopK: opts.TopK, TopP: opts.TopP,
				Seed: rolloutSeed(opts.Seed, step, i)}, StopTokens: stops}, Adapter: opts.Adapter}
		var err error
		if streams[i], err = e.Submit(ctx, seq); err != nil {
			return nil, fmt.Errorf("rl: rollout of prompt %d: %w", i, err)
		}
	}
	groups := make([]Group, len(prompts))
	var first error
	for i, ss := range streams {
		groups[i].Prompt = prompts[i]
		for _, s := range ss {
			c, err := s.Wait()
			if err != nil {
				if first == nil {
					first = fmt.Errorf("rl: rollout of prompt %d: %w", i, err)
				}
				continue
			}
			smp := Sample{Tokens: c.Tokens, Logprobs: c.Logprobs, Generated: len(c.Tokens), Truncated: c.FinishReason == generate.FinishLength}
			if c.StopToken >= 0 {
				smp.Tokens = append(append([]int32(nil), c.Tokens...), c.StopToken)
				smp.Logprobs = append(append([]float32(nil), c.Logprobs...), c.StopLogprob)
			}
			groups[i].Samples = append(groups[i].Samples, smp)
		}
	}
	return groups, first
}

// rolloutSeed is the seed of update step's completions of prompt i: the
// run's seed mixed with both by SplitMix64's finaliser.
func rolloutSeed(seed uint64, step, i int) uint64 {
	x := seed ^ uint64(step)*0x9E3779B97F4A7C15 ^ uint64(i)*0xD1B54A32D192ED03
	x = (x ^ x>>30) * 0xBF58476D1CE4E5B9
	x = (x ^ x>>27) * 0x94D049BB133111EB
	return x ^ x>>31
}

// Rows are an update's completions laid out as the step's rows of T
// positions: inputs X and targets Y (row-major [rows·T], padding 0), Mask
// 1 on the targets that are completion tokens (the rest, prompt and
// padding, 0) and Old the sampling policy's log-probabilities there.
type Rows struct {
	X, Y      []int32
	Mask, Old []float32
	N, T      int
}

// LayRows lays groups out as rows of T positions, the group's samples in
// order. A truncated completion is masked out entirely when
// maskTruncated (DAPO's overlong filtering). A prompt and completion
// longer than T+1 tokens is an error.
func LayRows(groups []Group, T int, maskTruncated bool) (Rows, error) {
	n := 0
	for _, g := range groups {
		n += len(g.Samples)
	}
	r := Rows{X: make([]int32, n*T), Y: make([]int32, n*T), Mask: make([]float32, n*T), Old: make([]float32, n*T), N: n, T: T}
	row := 0
	for gi, g := range groups {
		for si, s := range g.Samples {
			seq := append(append([]int32(nil), g.Prompt...), s.Tokens...)
			if len(seq)-1 > T {
				return Rows{}, fmt.Errorf("rl: prompt %d's completion %d holds %d tokens with its prompt, the rows %d+1", gi, si, len(seq), T)
			}
			at := row * T
			copy(r.X[at:], seq[:len(seq)-1])
			copy(r.Y[at:], seq[1:])
			if !(maskTruncated && s.Truncated) {
				for k := range s.Tokens {
					j := at + len(g.Prompt) - 1 + k
					r.Mask[j], r.Old[j] = 1, s.Logprobs[k]
				}
			}
			row++
		}
	}
	return r, nil
}
