package train

import (
	"fmt"
	"slices"

	"github.com/posttrainllm/posttrainllm/mlx"
	"github.com/posttrainllm/posttrainllm/model"
	"github.com/posttrainllm/posttrainllm/optim"
	"github.com/posttrainllm/posttrainllm/peft"
)

// PackedLossFunc is a WeightedLossFunc over packed rows: seg [B, T]
// numbers the example each input position belongs to (data.Rows.Seg), so
// that positions attend only within their own example.
type PackedLossFunc func(trainable, frozen []*mlx.Array, x, y, w, seg *mlx.Array) *mlx.Array

// NewPackedStep is NewWeightedStep for a loss over packed rows: every
// update's batch carries the segments (Batch.Seg) as a fourth [N, B, T]
// input, sliced per microbatch like x, y and w.
func NewPackedStep(loss PackedLossFunc, opt optim.Optimizer, nTrainable, nFrozen, nState int, opts StepOptions) (*Step, error) {
	if nFrozen < 0 {
		return nil, fmt.Errorf("train: step over %d frozen arrays, want >= 0", nFrozen)
	}
	P, F := nTrainable, nFrozen
	s, err := newStep(func(in []*mlx.Array) []*mlx.Array {
		return []*mlx.Array{loss(in[:P], in[P:P+F], in[P+F], in[P+F+1], in[P+F+2], in[P+F+3])}
	}, opt, nTrainable, nFrozen, nState, true, opts)
	if err != nil {
		return nil, err
	}
	s.packed = true
	return s, nil
}

// PackedFullLoss is FullLoss over packed rows.
func PackedFullLoss(m *model.TinyGPT) PackedLossFunc {
	return func(params, _ []*mlx.Array, x, y, w, seg *mlx.Array) *mlx.Array {
		ce, lse := m.PackedLossTerms(params, nil, x, y, seg)
		return weightedTerms(m, ce, lse, w)
	}
}

// PackedAdapterLoss is AdapterLoss over packed rows.
func PackedAdapterLoss(m *model.TinyGPT, a *peft.Adapter) PackedLossFunc {
	return func(adapter, base []*mlx.Array, x, y, w, seg *mlx.Array) *mlx.Array {
		lin, params, err := a.Linears(base, adapter)
		if err != nil {
			return mlx.ErrorArray(err)
		}
		ce, lse := m.PackedLossTerms(params, lin, x, y, seg)
		return weightedTerms(m, ce, lse, w)
	}
}

// checkSegments refuses a packed step's batch without segments of x's
// shape, and segments given to a step that does not take them.
func (s *Step) checkSegments(batch []*mlx.Array) error {
	if !s.packed {
		if s.weighted && len(batch) > 3+s.nRows {
			return fmt.Errorf("train: batch of %d arrays for a weighted step, want x, y and w and %d row inputs (segments need NewPackedStep)", len(batch), s.nRows)
		}
		return nil
	}
	if len(batch) != 4 || batch[3] == nil {
		return fmt.Errorf("train: a packed step's batch needs segments (Batch.Seg)")
	}
	seg, x := batch[3], batch[0]
	if err := seg.Err(); err != nil {
		return fmt.Errorf("train: segments: %w", err)
	}
	if seg.Dtype() != mlx.Int32 || !slices.Equal(seg.Shape(), x.Shape()) {
		return fmt.Errorf("train: segments are %v of shape %v, want int32 of the batch's shape %v", seg.Dtype(), seg.Shape(), x.Shape())
	}
	return nil
}
