package data

import "fmt"

// Batch is one optimizer step's worth of training windows: N microbatches
// of B sequences of T tokens. X and Y have length N*B*T and are laid out
// [N, B, T], so microbatch i is X[i*B*T:(i+1)*B*T]; Y holds the next-token
// targets of X.
type Batch struct {
	// X holds the input windows and Y their targets, Y[i] following X[i]
	// in the corpus.
	X, Y []int32
	// N is the number of microbatches, B the sequences per microbatch and
	// T the tokens per sequence.
	N, B, T int
	// Starts, when not nil, holds the batch as window starts in the
	// sampler's view instead of tokens (NewStartsBatch,
	// Sampler.FillStarts): N·B of them, laid out [N, B], window k being
	// View[Starts[k] : Starts[k]+T+1]; X and Y are then nil.
	Starts []int32
	// State is the sampler state after this batch was drawn: restoring it
	// with Sampler.SetState continues with the batch that follows, so a
	// checkpoint taken after consuming this batch resumes exactly. It is
	// reused with the batch, so copy it before Prefetcher.Release to keep
	// it.
	State []byte
}

// NewBatch allocates a batch of n microbatches of b sequences of t tokens.
func NewBatch(n, b, t int) (*Batch, error) {
	if err := checkBatchShape(n, b, t); err != nil {
		return nil, err
	}
	size := n * b * t
	return &Batch{X: make([]int32, size), Y: make([]int32, size), N: n, B: b, T: t}, nil
}

// NewStartsBatch allocates a batch of n microbatches of b windows of t
// tokens held as their starts (Batch.Starts), for a consumer that has the
// view's tokens where it computes (train.TokenStream).
func NewStartsBatch(n, b, t int) (*Batch, error) {
	if err := checkBatchShape(n, b, t); err != nil {
		return nil, err
	}
	return &Batch{Starts: make([]int32, n*b), N: n, B: b, T: t}, nil
}

// checkBatchShape checks that n, b and t are positive and that n*b*t fits
// in an int.
func checkBatchShape(n, b, t int) error {
	const maxInt = int(^uint(0) >> 1)
	if n < 1 || b < 1 || t < 1 {
		return fmt.Errorf("batch shape [N=%d, B=%d, T=%d], want every dimension at least 1", n, b, t)
	}
	if b > maxInt/t || n > maxInt/(b*t) {
		return fmt.Errorf("batch shape [N=%d, B=%d, T=%d] has too many tokens to address", n, b, t)
	}
	return nil
}

// FillBatch draws batch.N*batch.B windows into batch, as tokens (Fill) or,
// for a batch of Starts, as window starts (FillStarts), and records the
// sampler state after them in batch.State, reusing its buffers. The
// batch's T must equal the sampler's context.
func (s *Sampler) FillBatch(batch *Batch) error {
	if batch.T != s.context {
		return fmt.Errorf("batch T = %d, want the sampler context %d", batch.T, s.context)
	}
	if sh := s.shard; sh.size > 1 && (batch.N*batch.B)%sh.rows != 0 {
		return fmt.Errorf("batch [N=%d, B=%d] has %d windows, want a multiple of the %d rows per microbatch of rank %d of %d",
			batch.N, batch.B, batch.N*batch.B, sh.rows, sh.rank, sh.size)
	}
	if batch.Starts != nil {
		if n := batch.N * batch.B; len(batch.Starts) != n || batch.X != nil || batch.Y != nil {
			return fmt.Errorf("batch [N=%d, B=%d] of window starts has %d starts and %d/%d tokens in X/Y, want %d starts and no tokens",
				batch.N, batch.B, len(batch.Starts), len(batch.X), len(batch.Y), n)
		}
		if err := s.FillStarts(batch.Starts); err != nil {
			return err
		}
	} else {
		if size := batch.N * batch.B * batch.T; len(batch.X) != size || len(batch.Y) != size {
			return fmt.Errorf("batch [N=%d, B=%d, T=%d] has len(X) = %d and len(Y) = %d, want %d",
				batch.N, batch.B, batch.T, len(batch.X), len(batch.Y), size)
		}
		s.Fill(batch.X, batch.Y)
	}
	state, err := s.AppendState(batch.State[:0])
	if err != nil {
		return err
	}
	batch.State = state
	return nil
}
