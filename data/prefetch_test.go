package data

import (
	"errors"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
)

// plainBatches draws count batches of [n, b, t] from a fresh sampler with
// seed, without a prefetcher.
func plainBatches(t *testing.T, view View, seed uint64, n, b, tt, count int) []*Batch {
	t.Helper()
	s, err := NewSampler(view, tt, seed)
	if err != nil {
		t.Fatal(err)
	}
	var out []*Batch
	for range count {
		batch, _ := NewBatch(n, b, tt)
		if err := s.FillBatch(batch); err != nil {
			t.Fatal(err)
		}
		out = append(out, batch)
	}
	return out
}

func sameBatch(a, b *Batch) bool {
	return a.N == b.N && a.B == b.B && a.T == b.T &&
		slices.Equal(a.X, b.X) && slices.Equal(a.Y, b.Y) && slices.Equal(a.State, b.State)
}

func TestPrefetcherMatchesSampler(t *testing.T) {
	view := NewTokens(seq(20000)).All()
	const n, b, tt, count = 2, 3, 16, 40
	want := plainBatches(t, view, 11, n, b, tt, count)
	for _, depth := range []int{1, 3, 8} {
		s, _ := NewSampler(view, tt, 11)
		p, err := NewPrefetcher(s, n, b, tt, depth)
		if err != nil {
			t.Fatal(err)
		}
		for i := range count {
			got, err := p.Next()
			if err != nil {
				t.Fatal(err)
			}
			if !sameBatch(got, want[i]) {
				t.Fatalf("depth %d: batch %d differs from the plain sampler's", depth, i)
			}
			// Release every other batch so that both reused and fresh
			// buffers are exercised.
			if i%2 == 0 {
				p.Release(got)
			}
		}
		p.Stop()
	}
}

func TestPrefetcherStateResumesExactly(t *testing.T) {
	view := NewTokens(seq(20000)).All()
	const n, b, tt = 1, 4, 8
	s, _ := NewSampler(view, tt, 21)
	p, err := NewPrefetcher(s, n, b, tt, 4)
	if err != nil {
		t.Fatal(err)
	}
	var batches []*Batch
	for range 6 {
		batch, err := p.Next()
		if err != nil {
			t.Fatal(err)
		}
		batches = append(batches, batch) // not released: kept intact
	}
	p.Stop()
	// A checkpoint after consuming batch 2 resumes at batch 3 even though
	// the prefetcher had already drawn further ahead.
	resumed, _ := NewSampler(view, tt, 0)
	if err := resumed.SetState(batches[2].State); err != nil {
		t.Fatal(err)
	}
	q, err := NewPrefetcher(resumed, n, b, tt, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Stop()
	for i := 3; i < 6; i++ {
		got, err := q.Next()
		if err != nil {
			t.Fatal(err)
		}
		if !sameBatch(got, batches[i]) {
			t.Fatalf("resumed batch differs from original batch %d", i)
		}
	}
}

func TestPrefetcherStopLeavesNoGoroutine(t *testing.T) {
	view := NewTokens(seq(5000)).All()
	before := runtime.NumGoroutine()
	var ps []*Prefetcher
	for depth := 1; depth <= 8; depth++ {
		s, _ := NewSampler(view, 8, uint64(depth))
		p, err := NewPrefetcher(s, 1, 2, 8, depth)
		if err != nil {
			t.Fatal(err)
		}
		if depth%2 == 0 {
			if _, err := p.Next(); err != nil {
				t.Fatal(err)
			}
		}
		ps = append(ps, p)
	}
	if runtime.NumGoroutine() < before+len(ps) {
		t.Fatalf("%d goroutines with %d prefetchers running, want at least %d", runtime.NumGoroutine(), len(ps), before+len(ps))
	}
	for _, p := range ps {
		p.Stop()
		p.Stop() // idempotent
	}
	waitGoroutines(t, before)
	for _, p := range ps {
		if _, err := p.Next(); !errors.Is(err, ErrPrefetcherStopped) {
			t.Errorf("Next after Stop: err = %v, want ErrPrefetcherStopped", err)
		}
	}
}

func TestPrefetcherConcurrentStop(t *testing.T) {
	view := NewTokens(seq(5000)).All()
	before := runtime.NumGoroutine()
	s, _ := NewSampler(view, 8, 1)
	p, _ := NewPrefetcher(s, 1, 1, 8, 2)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(p.Stop)
	}
	// A consumer blocked in Next when Stop happens must be woken.
	wg.Go(func() {
		for {
			if _, err := p.Next(); err != nil {
				return
			}
		}
	})
	wg.Wait()
	waitGoroutines(t, before)
}

func TestPrefetcherSteadyStateDoesNotAllocate(t *testing.T) {
	view := NewTokens(seq(50000)).All()
	s, _ := NewSampler(view, 32, 9)
	p, err := NewPrefetcher(s, 2, 4, 32, 3)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop()
	step := func() {
		batch, err := p.Next()
		if err != nil {
			panic(err)
		}
		p.Release(batch)
	}
	for range 50 { // let the free list fill
		step()
	}
	if allocs := testing.AllocsPerRun(200, step); allocs != 0 {
		t.Errorf("Next+Release allocates %v times per batch in steady state, want 0", allocs)
	}
}

func TestNewPrefetcherErrors(t *testing.T) {
	s, _ := NewSampler(NewTokens(seq(100)).All(), 8, 1)
	for _, tc := range []struct {
		n, b, t, depth int
		want           string
	}{
		{1, 1, 8, 0, "depth 0, want 1 to 8"},
		{1, 1, 8, 9, "depth 9, want 1 to 8"},
		{0, 1, 8, 2, "N=0"},
		{1, 1, 4, 2, "T = 4, want the sampler context 8"},
	} {
		p, err := NewPrefetcher(s, tc.n, tc.b, tc.t, tc.depth)
		if err == nil {
			p.Stop()
			t.Errorf("NewPrefetcher(n=%d b=%d t=%d depth=%d) succeeded", tc.n, tc.b, tc.t, tc.depth)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("NewPrefetcher(n=%d b=%d t=%d depth=%d): error %q, want %q", tc.n, tc.b, tc.t, tc.depth, err, tc.want)
		}
	}
}
