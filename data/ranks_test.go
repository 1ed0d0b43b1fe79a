package data

import (
	"bytes"
	"slices"
	"testing"
)

// Two ranks with batch B, accumulating over N microbatches, draw exactly
// the windows of one process with batch 2B: rank r's microbatch i is rows
// r·B … (r+1)·B−1 of that process's microbatch i, step after step, and both
// ranks end each step in the single process's random state.
func TestShardRanksSplitTheDoubledBatch(t *testing.T) {
	const ranks, n, b, ctx, steps = 2, 3, 4, 8, 3
	view := NewTokens(seq(100000)).All()
	whole, err := NewSampler(view, ctx, 7)
	if err != nil {
		t.Fatal(err)
	}
	shards := make([]*Sampler, ranks)
	for r := range shards {
		if shards[r], err = NewSampler(view, ctx, 7); err != nil {
			t.Fatal(err)
		}
		if err := shards[r].Shard(r, ranks, b); err != nil {
			t.Fatal(err)
		}
	}
	big, _ := NewBatch(n, ranks*b, ctx)
	local := make([]*Batch, ranks)
	for r := range local {
		local[r], _ = NewBatch(n, b, ctx)
	}
	for step := 0; step < steps; step++ {
		if err := whole.FillBatch(big); err != nil {
			t.Fatal(err)
		}
		for r, s := range shards {
			if err := s.FillBatch(local[r]); err != nil {
				t.Fatal(err)
			}
			for i := 0; i < n; i++ {
				for j := 0; j < b; j++ {
					row := func(bt *Batch, xs []int32, mb, k int) []int32 {
						off := (mb*bt.B + k) * ctx
						return xs[off : off+ctx]
					}
					if got, want := row(local[r], local[r].X, i, j), row(big, big.X, i, r*b+j); !slices.Equal(got, want) {
						t.Fatalf("step %d rank %d microbatch %d row %d: x = %v, want row %d of the doubled batch %v", step, r, i, j, got, r*b+j, want)
					}
					if got, want := row(local[r], local[r].Y, i, j), row(big, big.Y, i, r*b+j); !slices.Equal(got, want) {
						t.Fatalf("step %d rank %d microbatch %d row %d: y = %v, want %v", step, r, i, j, got, want)
					}
				}
			}
			if !bytes.Equal(local[r].State, big.State) {
				t.Fatalf("step %d rank %d: sampler state differs from the single process's", step, r)
			}
		}
	}
}

// A plan may run a rank's windows in other microbatches (Plan.MicroBatch);
// the flat sequence of windows stays the same.
func TestShardIndependentOfMicroBatching(t *testing.T) {
	view := NewTokens(seq(50000)).All()
	fill := func(n, b int) []int32 {
		s, _ := NewSampler(view, 5, 3)
		if err := s.Shard(1, 3, 4); err != nil {
			t.Fatal(err)
		}
		bt, _ := NewBatch(n, b, 5)
		if err := s.FillBatch(bt); err != nil {
			t.Fatal(err)
		}
		return bt.X
	}
	if a, b := fill(2, 4), fill(1, 8); !slices.Equal(a, b) {
		t.Fatalf("[2, 4] and [1, 8] batches of one shard hold different windows")
	}
}

func TestShardRejectsBadInput(t *testing.T) {
	s, _ := NewSampler(NewTokens(seq(1000)).All(), 4, 1)
	for _, c := range []struct{ rank, size, rows int }{{2, 2, 4}, {-1, 2, 4}, {0, 0, 4}, {0, 2, 0}} {
		if err := s.Shard(c.rank, c.size, c.rows); err == nil {
			t.Errorf("Shard(%d, %d, %d) = nil, want an error", c.rank, c.size, c.rows)
		}
	}
	if err := s.Shard(0, 2, 4); err != nil {
		t.Fatal(err)
	}
	bt, _ := NewBatch(1, 3, 4)
	if err := s.FillBatch(bt); err == nil {
		t.Fatal("FillBatch of 3 windows on a shard of 4 rows = nil, want an error")
	}
}
