package data

import (
	"slices"
	"strings"
	"testing"
)

// windowsAt copies the windows at starts from view into x and y, as a
// consumer of window starts (train.TokenStream) gathers them.
func windowsAt(view View, starts []int32, T int) (x, y []int32) {
	x, y = make([]int32, len(starts)*T), make([]int32, len(starts)*T)
	for k, s := range starts {
		view.CopyInto(x[k*T:(k+1)*T], int(s))
		view.CopyInto(y[k*T:(k+1)*T], int(s)+1)
	}
	return x, y
}

func TestFillStartsDescribesFillsWindows(t *testing.T) {
	view := NewTokens(seq(5000)).View(100, 5000)
	const T, rows = 16, 3
	for _, ranks := range []int{1, 2, 3} {
		for rank := range ranks {
			tokens, _ := NewSampler(view, T, 9)
			starts, _ := NewSampler(view, T, 9)
			if ranks > 1 {
				if err := tokens.Shard(rank, ranks, rows); err != nil {
					t.Fatal(err)
				}
				if err := starts.Shard(rank, ranks, rows); err != nil {
					t.Fatal(err)
				}
			}
			for batch := range 4 {
				x, y := make([]int32, 2*rows*T), make([]int32, 2*rows*T)
				tokens.Fill(x, y)
				st := make([]int32, 2*rows)
				if err := starts.FillStarts(st); err != nil {
					t.Fatal(err)
				}
				gx, gy := windowsAt(view, st, T)
				if !slices.Equal(gx, x) || !slices.Equal(gy, y) {
					t.Fatalf("rank %d of %d, batch %d: the windows at starts %v differ from Fill's", rank, ranks, batch, st)
				}
				a, _ := tokens.State()
				b, _ := starts.State()
				if !slices.Equal(a, b) {
					t.Fatalf("rank %d of %d, batch %d: sampler states differ after Fill and FillStarts", rank, ranks, batch)
				}
			}
		}
	}
}

func TestFillStartsRefuses(t *testing.T) {
	view, _ := dropoutView(t)
	s, _ := NewSampler(view, 32, 1)
	if err := s.Shard(0, 2, 3); err != nil {
		t.Fatal(err)
	}
	if err := s.FillStarts(make([]int32, 4)); err == nil || !strings.Contains(err.Error(), "multiple") {
		t.Errorf("4 starts on a shard of 3 rows: err = %v, want a multiple of the rows", err)
	}
	b, err := NewBPEDropout(0.1)
	if err != nil {
		t.Fatal(err)
	}
	s.SetBPEDropout(b)
	if err := s.FillStarts(make([]int32, 3)); err == nil || !strings.Contains(err.Error(), "BPE-dropout") {
		t.Errorf("starts with BPE-dropout: err = %v, want a refusal naming BPE-dropout", err)
	}
	if _, err := NewStartsPrefetcher(s, 1, 3, 32, 2); err == nil {
		t.Error("NewStartsPrefetcher accepted a sampler with BPE-dropout")
	}
}

func TestStartsPrefetcherMatchesSampler(t *testing.T) {
	view := NewTokens(seq(20000)).All()
	const n, b, tt, count = 2, 3, 16, 30
	want := plainBatches(t, view, 11, n, b, tt, count)
	s, _ := NewSampler(view, tt, 11)
	p, err := NewStartsPrefetcher(s, n, b, tt, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop()
	for i := range count {
		got, err := p.Next()
		if err != nil {
			t.Fatal(err)
		}
		if got.X != nil || len(got.Starts) != n*b {
			t.Fatalf("batch %d holds %d tokens and %d starts, want none and %d", i, len(got.X), len(got.Starts), n*b)
		}
		x, y := windowsAt(view, got.Starts, tt)
		if !slices.Equal(x, want[i].X) || !slices.Equal(y, want[i].Y) || !slices.Equal(got.State, want[i].State) {
			t.Fatalf("batch %d: windows or state differ from the plain sampler's", i)
		}
		p.Release(got)
	}
}

func TestFillBatchChecksStarts(t *testing.T) {
	s, _ := NewSampler(NewTokens(seq(1000)).All(), 8, 1)
	b, err := NewStartsBatch(2, 3, 8)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.FillBatch(b); err != nil {
		t.Fatal(err)
	}
	b.Starts = b.Starts[:5]
	if err := s.FillBatch(b); err == nil || !strings.Contains(err.Error(), "5 starts") {
		t.Errorf("5 starts for [2, 3]: err = %v, want one naming 5 starts", err)
	}
	if _, err := NewStartsBatch(0, 3, 8); err == nil {
		t.Error("NewStartsBatch(0, 3, 8) succeeded")
	}
}
