package generate

import (
	"context"
	"slices"
	"testing"

	"github.com/posttrainllm/posttrainllm/mlx"
)

// The decoder schedules each step before reading the token of the one
// before, so a run ending on a stop token has fed it once more; the cache
// then drops it: it holds the prompt and the completion, and a next run
// from it gives what a fresh decoder gives.
func TestDecoderCacheAfterStop(t *testing.T) {
	m := testModel(t, chatTokenizer(), nil, nil)
	ctx, prompt := context.Background(), []int32{'H', 'i'}
	opts := Options{Sampling: Sampling{MaxTokens: 30}}
	all, _, err := Tokens(ctx, m.Net, m.Params, prompt, opts, nil)
	if err != nil {
		t.Fatal(err)
	}
	stop := all[6]
	first := slices.Index(all, stop)
	err = mlx.Do(func() error {
		d := newDecoder(m.Net, m.Params)
		defer d.free()
		out, reason, err := d.run(ctx, prompt, Options{Sampling: opts.Sampling, StopTokens: []int32{stop}}, nil)
		if err != nil || reason != FinishStop || !slices.Equal(out, all[:first]) {
			t.Fatalf("stop at %d: %v, %q, %v; want %v", stop, out, reason, err, all[:first])
		}
		held := slices.Concat(prompt, out)
		if d.cache.Offset != len(held) || !slices.Equal(d.seen, held) {
			t.Fatalf("after the stop the cache holds %d positions (%v), want the prompt and completion %v", d.cache.Offset, d.seen, held)
		}
		next := append(held, stop)
		fed := d.fed
		again, _, err := d.run(ctx, next, Options{Sampling: Sampling{MaxTokens: 8}}, nil)
		if err != nil {
			return err
		}
		// The stop token, then each token generated but the last.
		if n, want := d.fed-fed, 1+len(again)-1; n != want {
			t.Errorf("the next run fed %d tokens, want %d: the cache held all but the stop token", n, want)
		}
		fresh := newDecoder(m.Net, m.Params)
		defer fresh.free()
		want, _, err := fresh.run(ctx, next, Options{Sampling: Sampling{MaxTokens: 8}}, nil)
		if err != nil {
			return err
		}
		if !slices.Equal(again, want) {
			t.Errorf("continued from the cache: %v; from scratch: %v", again, want)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
