package step

import (
	"errors"
	"fmt"

	"github.com/posttrainllm/posttrainllm/data"
)

// Batch is one update's inputs as host tokens: N microbatches of B
// sequences of T tokens, row-major [N, B, T], with N the step's Accum.
// Keep N, B and T the same for a whole run: a new shape traces the step
// again. Inputs a step may take later (a loss mask, say) become fields
// here, so loops written against Batch keep compiling.
type Batch struct {
	X, Y    []int32 // inputs and their next-token targets, N·B·T each
	N, B, T int
	// W weighs each target's loss, N·B·T values (typically 1 for a
	// target that counts and 0 for prompt or padding); only a weighted
	// step (Layout.Inputs WeightedInputs) reads it, and needs it.
	W []float32
	// WeightSum is what W is normalised by: the update's loss is
	// Σ W·loss / WeightSum. Zero means the sum of W, this update's own
	// token count. A data-parallel loop passes the sum over all ranks, so
	// every rank divides by the global count. An update whose weights are
	// all zero has loss 0 and zero gradients, not 0/0. For a row step
	// (RowInputs) it normalises RowW instead, and W is passed as it is.
	WeightSum float64
	// RowW weighs each row's loss, N·B values, for a row step only
	// (RowInputs), which needs it: a preference loss puts 1 on the chosen
	// row of each pair and 0 on the rejected one, so the update's loss is
	// the mean over its pairs (Σ RowW·loss / WeightSum). W then is the
	// token mask the loss sums log-probabilities under, not normalised.
	RowW []float32
	// RowInputs are a row step's per-row inputs after RowW, N·B values
	// each, laid out [N, B] (Layout.RowInputs of them).
	RowInputs [][]float32
	// PositionInputs are a row step's per-position inputs, N·B·T values
	// each, laid out like X (Layout.PositionInputs of them): an online
	// objective's old log-probability of each target, say.
	PositionInputs [][]float32
	// Seg numbers, for packed rows, the example each input position
	// belongs to (data.Rows.Seg), N·B·T values; only a packed step
	// (PackedInputs) reads it, and needs it.
	Seg []int32
	// Stream and Starts, set together in place of X and Y, hold the batch
	// as windows of a token stream on the device (TokenStream.Batch):
	// N·B window starts laid out [N, B], window k's inputs being
	// Stream[Starts[k] : Starts[k]+T] and its targets the tokens one
	// further. The step gathers them itself. Unweighted steps only.
	Stream *TokenStream
	Starts []int32
}

// BatchOf views a data batch (from a Sampler or Prefetcher) as a step's
// Batch; the token slices are shared, not copied.
func BatchOf(b *data.Batch) Batch {
	return Batch{X: b.X, Y: b.Y, N: b.N, B: b.B, T: b.T}
}

// Check refuses a batch that does not fit a step of accum microbatches.
func (b Batch) Check(accum int) error {
	if b.N != accum || b.B < 1 || b.T < 1 {
		return fmt.Errorf("step: batch of shape [%d %d %d], want [accum=%d, batch >= 1, context >= 1]", b.N, b.B, b.T, accum)
	}
	if b.Stream != nil || b.Starts != nil {
		return b.checkWindows()
	}
	if n := b.N * b.B * b.T; len(b.X) != n || len(b.Y) != n {
		return fmt.Errorf("step: batch holds %d inputs and %d targets, want N·B·T = %d·%d·%d = %d each",
			len(b.X), len(b.Y), b.N, b.B, b.T, n)
	}
	if b.W != nil && len(b.W) != len(b.X) {
		return fmt.Errorf("step: batch holds %d loss weights for %d targets, want one per target", len(b.W), len(b.X))
	}
	if b.Seg != nil && len(b.Seg) != len(b.X) {
		return fmt.Errorf("step: batch holds %d segment ids for %d positions, want one per position", len(b.Seg), len(b.X))
	}
	if b.RowW != nil && len(b.RowW) != b.N*b.B {
		return fmt.Errorf("step: batch holds %d row weights for %d rows, want one per row", len(b.RowW), b.N*b.B)
	}
	for k, r := range b.RowInputs {
		if len(r) != b.N*b.B {
			return fmt.Errorf("step: batch row input %d holds %d values for %d rows, want one per row", k, len(r), b.N*b.B)
		}
	}
	for k, p := range b.PositionInputs {
		if len(p) != len(b.X) {
			return fmt.Errorf("step: batch position input %d holds %d values for %d positions, want one per position", k, len(p), len(b.X))
		}
	}
	return nil
}

// checkWindows refuses a batch of window starts that is incomplete or
// reaches outside its stream: a gather out of range would read arbitrary
// tokens on the device rather than fail.
func (b Batch) checkWindows() error {
	switch {
	case b.Stream == nil || b.Starts == nil:
		return errors.New("step: batch with window starts but no token stream, or a stream but no starts; want both (TokenStream.Batch)")
	case b.X != nil || b.Y != nil || b.W != nil:
		return errors.New("step: batch with both window starts and tokens or weights; want one form")
	case len(b.Starts) != b.N*b.B:
		return fmt.Errorf("step: batch [%d %d] of %d window starts, want N·B = %d", b.N, b.B, len(b.Starts), b.N*b.B)
	case b.T != b.Stream.context:
		return fmt.Errorf("step: batch of windows of %d tokens from a stream for context %d; want the same", b.T, b.Stream.context)
	}
	last := int32(b.Stream.n - b.T - 1) // a window and its targets end at Len-1
	for k, s := range b.Starts {
		if s < 0 || s > last {
			return fmt.Errorf("step: window start %d (window %d) outside the stream of %d tokens, want 0 to %d for context %d",
				s, k, b.Stream.n, last, b.T)
		}
	}
	return nil
}

// NormalizedWeights returns b.W divided by the update's weight total
// (WeightSum, or the sum of W when that is 0), the weights a weighted
// step takes, and that total. All-zero weights stay zero.
func (b Batch) NormalizedWeights() ([]float32, float64, error) {
	return normalize(b.W, b.WeightSum, "loss weight")
}
