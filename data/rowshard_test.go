package data

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"testing"
)

// shardRows are packed rows whose counted targets differ from row to row
// (completions of different lengths), so that each rank's share of an
// update counts a different number of targets.
func shardRows(t *testing.T) *Rows {
	t.Helper()
	tok := byteTokenizer{}
	var exs []Example
	for i := 0; i < 13; i++ {
		exs = append(exs, completion(tok, strings.Repeat("p", 1+i%4), strings.Repeat("c", 1+(i*5)%7)))
	}
	rows, err := BuildRows(exs, 6, 0, true)
	if err != nil {
		t.Fatal(err)
	}
	return rows
}

// Two ranks with batch B over N microbatches draw exactly the rows of one
// process with batch 2B, epoch after epoch: rank r's microbatch i holds
// rows r·B … (r+1)·B−1 of that process's microbatch i (tokens, weights
// and segments). Each rank's WeightSum is the weight total of the whole
// doubled batch, not of its own rows, and both ranks end each update in
// the single process's sampler state.
func TestRowShardRanksSplitTheDoubledBatch(t *testing.T) {
	rows := shardRows(t)
	const ranks, n, b, steps = 2, 2, 3, 5 // 5 updates of 12 rows cross several epochs
	T := rows.T
	whole, err := NewRowSampler(rows, 9)
	if err != nil {
		t.Fatal(err)
	}
	shards := make([]*RowSampler, ranks)
	local := make([]*WeightedBatch, ranks)
	for r := range shards {
		shards[r], _ = NewRowSampler(rows, 9)
		if err := shards[r].Shard(r, ranks, b); err != nil {
			t.Fatal(err)
		}
		local[r], _ = NewWeightedBatch(n, b, T)
	}
	big, _ := NewWeightedBatch(n, ranks*b, T)
	rowOf := func(bt *WeightedBatch, mb, k int) string {
		off := (mb*bt.B + k) * T
		return fmt.Sprint(bt.X[off:off+T], bt.Y[off:off+T], bt.W[off:off+T], bt.Seg[off:off+T])
	}
	for step := 0; step < steps; step++ {
		if err := whole.FillBatch(big); err != nil {
			t.Fatal(err)
		}
		total := 0.0
		for _, w := range big.W {
			total += float64(w)
		}
		for r, s := range shards {
			if err := s.FillBatch(local[r]); err != nil {
				t.Fatal(err)
			}
			own := 0.0
			for i := 0; i < n; i++ {
				for j := 0; j < b; j++ {
					if got, want := rowOf(local[r], i, j), rowOf(big, i, r*b+j); got != want {
						t.Fatalf("update %d rank %d microbatch %d row %d: %s, want row %d of the doubled batch %s", step, r, i, j, got, r*b+j, want)
					}
				}
			}
			for _, w := range local[r].W {
				own += float64(w)
			}
			if local[r].WeightSum != total || big.WeightSum != total {
				t.Fatalf("update %d rank %d: weight sum %g (the doubled batch's reports %g), want the doubled batch's total %g, not the rank's own %g",
					step, r, local[r].WeightSum, big.WeightSum, total, own)
			}
			if !bytes.Equal(local[r].State, big.State) {
				t.Fatalf("update %d rank %d: sampler state differs from the single process's", step, r)
			}
		}
		if whole.Epoch() < 1 && step == steps-1 {
			t.Fatalf("the updates stayed in epoch %d; the test wants to cross epochs", whole.Epoch())
		}
	}
}

// A shard resumes from the state any rank recorded: the state is the
// global stream's.
func TestRowShardResumesFromState(t *testing.T) {
	rows := shardRows(t)
	s, _ := NewRowSampler(rows, 4)
	if err := s.Shard(1, 2, 2); err != nil {
		t.Fatal(err)
	}
	bt, _ := NewWeightedBatch(1, 2, rows.T)
	for range 3 {
		if err := s.FillBatch(bt); err != nil {
			t.Fatal(err)
		}
	}
	state := slices.Clone(bt.State)
	if err := s.FillBatch(bt); err != nil {
		t.Fatal(err)
	}
	want := slices.Clone(bt.X)
	r, _ := NewRowSampler(rows, 4)
	if err := r.Shard(1, 2, 2); err != nil {
		t.Fatal(err)
	}
	if err := r.SetState(state); err != nil {
		t.Fatal(err)
	}
	if err := r.FillBatch(bt); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(bt.X, want) {
		t.Fatalf("resumed shard drew %v, want %v", bt.X, want)
	}
}

func TestRowShardRejectsBadInput(t *testing.T) {
	rows := shardRows(t)
	s, _ := NewRowSampler(rows, 1)
	for _, c := range []struct{ rank, size, rows int }{{2, 2, 4}, {-1, 2, 4}, {0, 0, 4}, {0, 2, 0}} {
		if err := s.Shard(c.rank, c.size, c.rows); err == nil {
			t.Errorf("Shard(%d, %d, %d) = nil, want an error", c.rank, c.size, c.rows)
		}
	}
	if err := s.Shard(0, 2, 4); err != nil {
		t.Fatal(err)
	}
	bt, _ := NewWeightedBatch(1, 3, rows.T)
	if err := s.FillBatch(bt); err == nil || !strings.Contains(err.Error(), "multiple") {
		t.Fatalf("FillBatch of 3 rows on a shard of 4 rows: error %v, want one asking for a multiple", err)
	}
}
