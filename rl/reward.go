package rl

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
)

// Completion is one sampled answer to a prompt.
type Completion struct {
	// Text is the decoded completion, without the prompt.
	Text string
	// Tokens is the completion's length in tokens.
	Tokens int
	// Truncated says the completion hit the completion budget before it
	// ended on its own.
	Truncated bool
}

// Item is one completion with the prompt it answers: what a reward
// scores.
type Item struct {
	Prompt     Prompt
	Completion Completion
}

// Scorer scores a batch of items, one number each, in the items' order.
// Scoring a whole batch at once lets a scorer amortize its set-up (one
// process, one request) over the batch.
type Scorer interface {
	// Name names the reward in metrics and errors.
	Name() string
	// Score returns one score per item.
	Score(ctx context.Context, items []Item) ([]float64, error)
}

// Func is a reward written in Go: the score of one completion of prompt
// p. It is called concurrently, so it must be safe for that.
type Func func(ctx context.Context, p Prompt, c Completion) (float64, error)

// rewardError is an error of the reward named reward on the item at
// index item (from 0; -1 for the batch as a whole).
type rewardError struct {
	reward string
	item   int
	err    error
}

func (e *rewardError) Error() string {
	if e.item < 0 {
		return fmt.Sprintf("reward %s: %v", e.reward, e.err)
	}
	return fmt.Sprintf("reward %s: item %d: %v", e.reward, e.item, e.err)
}

func (e *rewardError) Unwrap() error { return e.err }

// failure wraps err as an error of reward name on item (-1: the batch).
func failure(name string, item int, err error) error {
	return &rewardError{reward: name, item: item, err: err}
}

// FromFunc makes a Scorer of f: it calls f on the items concurrently,
// at most runtime.GOMAXPROCS at a time, and returns the scores in the
// items' order. The first error (or panic, which becomes an error
// naming the reward) stops the calls not yet started; a cancelled ctx
// does too.
func FromFunc(name string, f Func) Scorer { return funcScorer{name: name, f: f} }

// funcScorer is the Scorer FromFunc makes.
type funcScorer struct {
	name string
	f    Func
}

// Name names the reward.
func (s funcScorer) Name() string { return s.name }

// Score calls the function on every item, concurrently.
func (s funcScorer) Score(ctx context.Context, items []Item) ([]float64, error) {
	if s.f == nil {
		return nil, failure(s.name, -1, errors.New("nil function"))
	}
	out := make([]float64, len(items))
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		next     atomic.Int64
		done     atomic.Int64
		once     sync.Once
		firstErr error
		wg       sync.WaitGroup
	)
	workers := min(runtime.GOMAXPROCS(0), len(items))
	for range workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= len(items) || ctx.Err() != nil {
					return
				}
				v, err := s.call(ctx, i, items[i])
				if err != nil {
					once.Do(func() { firstErr = err })
					cancel()
					return
				}
				out[i] = v
				done.Add(1)
			}
		})
	}
	wg.Wait()
	if firstErr != nil {
		return nil, firstErr
	}
	if done.Load() < int64(len(items)) {
		// Cancelled from outside before every item was scored.
		return nil, failure(s.name, -1, ctx.Err())
	}
	return out, nil
}

// call runs the function on item i, turning a panic into an error.
func (s funcScorer) call(ctx context.Context, i int, it Item) (v float64, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = failure(s.name, i, fmt.Errorf("panic: %v", r))
		}
	}()
	v, err = s.f(ctx, it.Prompt, it.Completion)
	if err != nil {
		return 0, failure(s.name, i, err)
	}
	return v, nil
}

// Weighted is one reward of a weighted sum.
type Weighted struct {
	Scorer Scorer
	Weight float64
}

// Scores are the rewards of a batch of items.
type Scores struct {
	// Total is each item's reward: the sum of weight·score over the
	// rewards.
	Total []float64
	// Each holds each reward's raw (unweighted) scores by its name, for
	// metrics.
	Each map[string][]float64
}

// Score runs every reward on items, concurrently, and sums their
// weighted scores. Errors name the reward; the first one stops the
// others. Rewards must have distinct names, return one score per item,
// and only finite scores.
func Score(ctx context.Context, rewards []Weighted, items []Item) (Scores, error) {
	if len(rewards) == 0 {
		return Scores{}, errors.New("rewards: none given; want at least one reward")
	}
	names := make(map[string]bool, len(rewards))
	for i, w := range rewards {
		if w.Scorer == nil {
			return Scores{}, fmt.Errorf("rewards: reward %d has no scorer", i+1)
		}
		n := w.Scorer.Name()
		if names[n] {
			return Scores{}, fmt.Errorf("rewards: two rewards are named %q; want distinct names", n)
		}
		names[n] = true
		if math.IsNaN(w.Weight) || math.IsInf(w.Weight, 0) {
			return Scores{}, fmt.Errorf("rewards: reward %s has weight %v, want a finite number", n, w.Weight)
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	raw := make([][]float64, len(rewards))
	var (
		once     sync.Once
		firstErr error
		wg       sync.WaitGroup
	)
	for r, w := range rewards {
		wg.Go(func() {
			s, err := scoreOne(ctx, w.Scorer, items)
			if err != nil {
				once.Do(func() { firstErr = err })
				cancel()
				return
			}
			raw[r] = s
		})
	}
	wg.Wait()
	if firstErr != nil {
		return Scores{}, firstErr
	}
	out := Scores{Total: make([]float64, len(items)), Each: make(map[string][]float64, len(rewards))}
	for r, w := range rewards {
		out.Each[w.Scorer.Name()] = raw[r]
		for i, v := range raw[r] {
			out.Total[i] += w.Weight * v
		}
	}
	return out, nil
}

// scoreOne runs one reward and checks its answer: one finite score per
// item. Errors name the reward.
func scoreOne(ctx context.Context, s Scorer, items []Item) ([]float64, error) {
	name := s.Name()
	scores, err := s.Score(ctx, items)
	if err != nil {
		var re *rewardError
		if errors.As(err, &re) && re.reward == name {
			return nil, err
		}
		return nil, failure(name, -1, err)
	}
	if len(scores) != len(items) {
		return nil, failure(name, -1, fmt.Errorf("returned %d scores for %d items, want one each", len(scores), len(items)))
	}
	for i, v := range scores {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return nil, failure(name, i, fmt.Errorf("score %v is not a finite number", v))
		}
	}
	return scores, nil
}
