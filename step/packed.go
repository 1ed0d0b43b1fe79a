package step

import (
	"fmt"
	"slices"

	"github.com/posttrainllm/posttrainllm/mlx"
)

// checkSegments refuses a packed step's batch without segments of x's
// shape, and segments given to a step that does not take them.
func (s *Step) checkSegments(batch []*mlx.Array) error {
	if !s.packed {
		if s.weighted && len(batch) > 3+s.nRows+s.nPos {
			return fmt.Errorf("step: batch of %d arrays for a weighted step, want x, y and w and %d row inputs (segments need Layout.Inputs PackedInputs)", len(batch), s.nRows)
		}
		return nil
	}
	if len(batch) != 4 || batch[3] == nil {
		return fmt.Errorf("step: a packed step's batch needs segments (Batch.Seg)")
	}
	seg, x := batch[3], batch[0]
	if err := seg.Err(); err != nil {
		return fmt.Errorf("step: segments: %w", err)
	}
	if seg.Dtype() != mlx.Int32 || !slices.Equal(seg.Shape(), x.Shape()) {
		return fmt.Errorf("step: segments are %v of shape %v, want int32 of the batch's shape %v", seg.Dtype(), seg.Shape(), x.Shape())
	}
	return nil
}
