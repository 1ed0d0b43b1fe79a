package data

import (
	"errors"
	"fmt"
	"sync"
)

// ErrPrefetcherStopped is returned by Prefetcher.Next after Stop.
var ErrPrefetcherStopped = errors.New("data: prefetcher stopped")

// maxPrefetchDepth bounds how many batches a Prefetcher keeps ready.
const maxPrefetchDepth = 8

// Prefetcher fills batches from a Sampler on its own goroutine, up to a
// fixed depth ahead of the consumer, so that sampling overlaps the
// training step. Batches come out in exactly the order the sampler alone
// would produce them.
//
// Batches handed back with Release are reused, so a consumer that releases
// each batch when done with it allocates nothing in steady state.
//
// It works on host memory only and never calls MLX: a consumer running on
// the MLX thread (inside mlx.Do, as the trainer does) waits for it, which
// would deadlock if it waited for the MLX thread in turn.
type Prefetcher struct {
	sampler *Sampler
	n, b, t int
	starts  bool // batches of window starts (NewStartsPrefetcher)
	ready   chan *Batch
	free    chan *Batch
	stop    chan struct{}
	done    chan struct{}
	err     error // set by the goroutine before it closes ready
	once    sync.Once
}

// NewPrefetcher starts filling batches of n microbatches of b sequences of
// t tokens from s, keeping up to depth (1 to 8) of them ready. From then
// on the prefetcher owns s: the caller must not use s until Stop returns.
// Restore a checkpoint with s.SetState before calling NewPrefetcher.
func NewPrefetcher(s *Sampler, n, b, t, depth int) (*Prefetcher, error) {
	return newPrefetcher(s, n, b, t, depth, false)
}

// NewStartsPrefetcher is NewPrefetcher for batches of window starts
// (Batch.Starts, Sampler.FillStarts): the same windows in the same order,
// as N·B integers each instead of 2·N·B·T tokens. It fails for a sampler
// whose windows are not slices of its view (BPE-dropout).
func NewStartsPrefetcher(s *Sampler, n, b, t, depth int) (*Prefetcher, error) {
	if s.dropout != nil {
		return nil, fmt.Errorf("prefetcher: window starts of a sampler with BPE-dropout, whose windows are re-encoded; use NewPrefetcher")
	}
	return newPrefetcher(s, n, b, t, depth, true)
}

// newPrefetcher starts a prefetcher of token batches or, with starts, of
// window starts.
func newPrefetcher(s *Sampler, n, b, t, depth int, starts bool) (*Prefetcher, error) {
	if depth < 1 || depth > maxPrefetchDepth {
		return nil, fmt.Errorf("prefetcher: depth %d, want 1 to %d", depth, maxPrefetchDepth)
	}
	if err := checkBatchShape(n, b, t); err != nil {
		return nil, fmt.Errorf("prefetcher: %w", err)
	}
	if t != s.Context() {
		return nil, fmt.Errorf("prefetcher: T = %d, want the sampler context %d", t, s.Context())
	}
	p := &Prefetcher{
		sampler: s,
		n:       n, b: b, t: t,
		starts: starts,
		ready:  make(chan *Batch, depth),
		// The goroutine allocates only when free is empty, which bounds
		// the batches in flight at depth ready, one being filled and one
		// held by the consumer, plus any more the consumer holds at once.
		free: make(chan *Batch, depth+2),
		stop: make(chan struct{}),
		done: make(chan struct{}),
	}
	go p.run()
	return p, nil
}

// run fills batches until Stop.
func (p *Prefetcher) run() {
	defer close(p.done)
	defer close(p.ready)
	for {
		var batch *Batch
		select {
		case batch = <-p.free:
		default:
			batch = p.newBatch()
		}
		if err := p.sampler.FillBatch(batch); err != nil {
			p.err = fmt.Errorf("prefetcher: %w", err)
			return
		}
		select {
		case p.ready <- batch:
		case <-p.stop:
			return
		}
	}
}

// newBatch allocates a batch of the prefetcher's shape and kind.
func (p *Prefetcher) newBatch() *Batch {
	if p.starts {
		return &Batch{Starts: make([]int32, p.n*p.b), N: p.n, B: p.b, T: p.t}
	}
	size := p.n * p.b * p.t
	return &Batch{X: make([]int32, size), Y: make([]int32, size), N: p.n, B: p.b, T: p.t}
}

// Next returns the next batch, waiting for it if necessary. After Stop it
// returns ErrPrefetcherStopped.
func (p *Prefetcher) Next() (*Batch, error) {
	select {
	case <-p.stop:
		return nil, ErrPrefetcherStopped
	default:
	}
	select {
	case batch, ok := <-p.ready:
		if !ok {
			if p.err != nil {
				return nil, p.err
			}
			return nil, ErrPrefetcherStopped
		}
		return batch, nil
	case <-p.stop:
		return nil, ErrPrefetcherStopped
	}
}

// Release hands a batch returned by Next back for reuse. The caller must
// not touch the batch, its State included, afterwards. Releasing nil, or a
// batch of another shape or kind, does nothing.
func (p *Prefetcher) Release(batch *Batch) {
	if batch == nil || batch.N != p.n || batch.B != p.b || batch.T != p.t || (batch.Starts != nil) != p.starts {
		return
	}
	select {
	case p.free <- batch:
	default: // enough spares already; let the collector have it
	}
}

// Stop stops the goroutine and waits for it to exit. It is safe to call
// more than once and from several goroutines. The sampler then holds the
// state after the last batch filled, which may be ahead of the last batch
// Next returned: to checkpoint, save that batch's State instead.
func (p *Prefetcher) Stop() {
	p.once.Do(func() { close(p.stop) })
	<-p.done
}
