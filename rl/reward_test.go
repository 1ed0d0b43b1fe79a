package rl

import (
	"context"
	"errors"
	"math"
	"reflect"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// itemsOfLengths makes items whose completions have the given token
// counts.
func itemsOfLengths(n ...int) []Item {
	items := make([]Item, len(n))
	for i, t := range n {
		items[i] = Item{Prompt: Prompt{Text: "p"}, Completion: Completion{Tokens: t}}
	}
	return items
}

func TestFromFuncConcurrentInOrder(t *testing.T) {
	const workers = 4
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(workers))
	var active, peak, entered atomic.Int64
	wave := make(chan struct{})
	var notConcurrent atomic.Bool
	f := func(ctx context.Context, p Prompt, c Completion) (float64, error) {
		n := active.Add(1)
		defer active.Add(-1)
		for {
			m := peak.Load()
			if n <= m || peak.CompareAndSwap(m, n) {
				break
			}
		}
		// The first wave of calls waits until all workers are inside f,
		// which only happens when they run concurrently.
		if e := entered.Add(1); e == workers {
			close(wave)
		} else if e < workers {
			select {
			case <-wave:
			case <-time.After(10 * time.Second):
				notConcurrent.Store(true)
			}
		}
		return float64(c.Tokens) * 10, nil
	}
	lengths := make([]int, 37)
	for i := range lengths {
		lengths[i] = (i * 7) % 11
	}
	got, err := FromFunc("tens", f).Score(context.Background(), itemsOfLengths(lengths...))
	if err != nil {
		t.Fatal(err)
	}
	for i, l := range lengths {
		if got[i] != float64(l)*10 {
			t.Fatalf("score %d = %v, want %v (out of order?)", i, got[i], float64(l)*10)
		}
	}
	if notConcurrent.Load() {
		t.Errorf("the first %d calls never ran at the same time", workers)
	}
	if p := peak.Load(); p > workers {
		t.Errorf("%d calls at once, want at most GOMAXPROCS=%d", p, workers)
	}
}

func TestFromFuncPanicBecomesError(t *testing.T) {
	f := func(ctx context.Context, p Prompt, c Completion) (float64, error) {
		if c.Tokens == 5 {
			panic("bad completion")
		}
		return 1, nil
	}
	_, err := FromFunc("judge", f).Score(context.Background(), itemsOfLengths(1, 2, 3, 4, 5, 6))
	if err == nil {
		t.Fatal("no error from a panicking reward")
	}
	for _, w := range []string{"reward judge", "item 4", "panic", "bad completion"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not contain %q", err, w)
		}
	}
}

func TestFromFuncErrorWrapped(t *testing.T) {
	sentinel := errors.New("no network")
	f := func(ctx context.Context, p Prompt, c Completion) (float64, error) {
		if c.Tokens == 2 {
			return 0, sentinel
		}
		return 1, nil
	}
	_, err := FromFunc("remote", f).Score(context.Background(), itemsOfLengths(1, 2, 3))
	if !errors.Is(err, sentinel) || !strings.Contains(err.Error(), "reward remote: item 1") {
		t.Fatalf("error %v, want the function's error naming reward remote and item 1", err)
	}
}

func TestFromFuncCancel(t *testing.T) {
	t.Run("before", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		var calls atomic.Int64
		f := func(ctx context.Context, p Prompt, c Completion) (float64, error) {
			calls.Add(1)
			return 1, nil
		}
		_, err := FromFunc("r", f).Score(ctx, itemsOfLengths(1, 2, 3))
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("error %v, want context.Canceled", err)
		}
		if n := calls.Load(); n != 0 {
			t.Errorf("%d calls after cancellation, want 0", n)
		}
	})
	t.Run("during", func(t *testing.T) {
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var calls atomic.Int64
		f := func(ctx context.Context, p Prompt, c Completion) (float64, error) {
			if calls.Add(1) == 3 {
				cancel()
			}
			return 1, nil
		}
		_, err := FromFunc("r", f).Score(ctx, itemsOfLengths(1, 2, 3, 4, 5, 6, 7, 8))
		if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "reward r") {
			t.Fatalf("error %v, want context.Canceled naming reward r", err)
		}
		if n := calls.Load(); n != 3 {
			t.Errorf("%d calls, want 3 (none after the cancellation)", n)
		}
	})
}

// fixedScorer returns fixed scores, or an error.
type fixedScorer struct {
	name   string
	scores []float64
	err    error
}

func (s fixedScorer) Name() string { return s.name }

func (s fixedScorer) Score(ctx context.Context, items []Item) ([]float64, error) {
	return s.scores, s.err
}

func TestScoreWeightedSum(t *testing.T) {
	items := itemsOfLengths(1, 2, 3)
	rewards := []Weighted{
		{fixedScorer{name: "a", scores: []float64{1, 0, 1}}, 1},
		{fixedScorer{name: "b", scores: []float64{0.5, 1, 0}}, 0.2},
		{fixedScorer{name: "c", scores: []float64{-2, 4, 8}}, -0.5},
	}
	got, err := Score(context.Background(), rewards, items)
	if err != nil {
		t.Fatal(err)
	}
	// 1·a + 0.2·b − 0.5·c, by hand.
	want := []float64{1 + 0.1 + 1, 0 + 0.2 - 2, 1 + 0 - 4}
	for i := range want {
		if math.Abs(got.Total[i]-want[i]) > 1e-12 {
			t.Errorf("Total[%d] = %v, want %v", i, got.Total[i], want[i])
		}
	}
	wantEach := map[string][]float64{"a": {1, 0, 1}, "b": {0.5, 1, 0}, "c": {-2, 4, 8}}
	if !reflect.DeepEqual(got.Each, wantEach) {
		t.Errorf("Each = %v, want %v", got.Each, wantEach)
	}
}

func TestScoreErrors(t *testing.T) {
	items := itemsOfLengths(1, 2)
	ok := fixedScorer{name: "ok", scores: []float64{1, 1}}
	for _, tc := range []struct {
		name    string
		rewards []Weighted
		want    string
	}{
		{"none", nil, "none given"},
		{"duplicate", []Weighted{{ok, 1}, {ok, 2}}, `two rewards are named "ok"`},
		{"nan weight", []Weighted{{ok, math.NaN()}}, "reward ok has weight NaN"},
		{"count", []Weighted{{ok, 1}, {fixedScorer{name: "short", scores: []float64{1}}, 1}}, "reward short: returned 1 scores for 2 items"},
		{"inf score", []Weighted{{fixedScorer{name: "inf", scores: []float64{0, math.Inf(1)}}, 1}}, "reward inf: item 1: score +Inf is not a finite number"},
		{"plain error", []Weighted{{ok, 1}, {fixedScorer{name: "down", err: errors.New("server down")}, 1}}, "reward down: server down"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Score(context.Background(), tc.rewards, items)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestScoreNamesRewardOnce(t *testing.T) {
	f := func(ctx context.Context, p Prompt, c Completion) (float64, error) { panic("boom") }
	_, err := Score(context.Background(), []Weighted{{FromFunc("mine", f), 1}}, itemsOfLengths(1))
	if err == nil || strings.Count(err.Error(), "mine") != 1 {
		t.Fatalf("error %v, want one naming reward mine exactly once", err)
	}
}
