package step

import (
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/posttrainllm/posttrainllm/mlx"
)

// RunRows applies one update of a RowInputs step (rows: the row weights,
// the row inputs, then the position inputs [Accum, B, T]): Run with the
// frozen arrays, the token mask ([Accum, B, T] float32) and the per-row
// inputs ([Accum, B] float32 each), the row weights first, already divided
// by the update's weight total. Its loss is Σ rowWeight·loss over the
// update; Aux holds the auxiliary sums.
func (s *Step) RunRows(params, frozen, state []*mlx.Array, lr, x, y, mask *mlx.Array, rows ...*mlx.Array) (StepResult, error) {
	var res StepResult
	err := mlx.Do(func() error {
		if s.nRows == 0 {
			return fmt.Errorf("step: RunRows on a step without row inputs; use Run or RunWeighted")
		}
		out, err := s.apply(params, nil, frozen, state, lr, append([]*mlx.Array{x, y, mask}, rows...)...)
		if err != nil {
			return err
		}
		mlx.Free(out.copies...)
		res = StepResult{Params: out.params, State: out.state, Loss: out.loss, GradNorm: out.gradNorm, Aux: out.aux}
		return nil
	})
	return res, err
}

// checkRowInputs refuses a row step's batch without its row and position
// inputs, or with row inputs that are not float32 [Accum, B] for x's
// [Accum, B, T] and position inputs that are not float32 of x's shape;
// and row inputs given to a step that does not take them.
func (s *Step) checkRowInputs(batch []*mlx.Array) error {
	if s.nRows == 0 {
		return nil
	}
	if len(batch) != 3+s.nRows+s.nPos {
		return fmt.Errorf("step: a row step's batch needs x, y, the token mask, %d row inputs and %d position inputs, got %d arrays", s.nRows, s.nPos, len(batch))
	}
	x := batch[0]
	for k, a := range batch[3+s.nRows:] {
		if a == nil {
			return fmt.Errorf("step: position input %d is missing", k)
		}
		if err := a.Err(); err != nil {
			return fmt.Errorf("step: position input %d: %w", k, err)
		}
		if a.Dtype() != mlx.Float32 || !slices.Equal(a.Shape(), x.Shape()) {
			return fmt.Errorf("step: position input %d is %v of shape %v, want float32 of the batch's shape %v", k, a.Dtype(), a.Shape(), x.Shape())
		}
	}
	for k, a := range batch[3 : 3+s.nRows] {
		if a == nil {
			return fmt.Errorf("step: row input %d is missing", k)
		}
		if err := a.Err(); err != nil {
			return fmt.Errorf("step: row input %d: %w", k, err)
		}
		if a.Dtype() != mlx.Float32 || a.Ndim() != 2 || a.Dim(0) != x.Dim(0) || a.Dim(1) != x.Dim(1) {
			return fmt.Errorf("step: row input %d is %v of shape %v, want float32 [accum=%d, batch=%d]", k, a.Dtype(), a.Shape(), x.Dim(0), x.Dim(1))
		}
	}
	return nil
}

// rowInputs returns a row step's per-row inputs of b, the row weights
// normalised by the update's total (Batch.RowW, Batch.WeightSum) first,
// and that total; nothing for other steps, which must get no row inputs.
func (s *State) rowInputs(b Batch) ([][]float32, float64, error) {
	if s.step.nRows == 0 {
		if b.RowW != nil || b.RowInputs != nil || b.PositionInputs != nil {
			return nil, 0, errors.New("step: batch with row weights or row inputs for a step that takes none (Layout.Inputs RowInputs)")
		}
		return nil, 0, nil
	}
	if b.RowW == nil || b.W == nil {
		return nil, 0, errors.New("step: a row step's batch needs the token mask (Batch.W) and row weights (Batch.RowW)")
	}
	if len(b.RowInputs) != s.step.nRows-1 || len(b.PositionInputs) != s.step.nPos {
		return nil, 0, fmt.Errorf("step: batch with %d row inputs and %d position inputs for a row step of %d and %d",
			len(b.RowInputs), len(b.PositionInputs), s.step.nRows-1, s.step.nPos)
	}
	rw, total, err := normalize(b.RowW, b.WeightSum, "row weight")
	if err != nil {
		return nil, 0, err
	}
	return append([][]float32{rw}, b.RowInputs...), total, nil
}

// normalize returns w divided by total (by the sum of w when total is
// 0) and that total, refusing weights that are negative or not finite;
// what names them in errors.
func normalize(w []float32, total float64, what string) ([]float32, float64, error) {
	if total == 0 {
		for _, v := range w {
			total += float64(v)
		}
	}
	if math.IsNaN(total) || math.IsInf(total, 0) || total < 0 {
		return nil, 0, fmt.Errorf("step: %ss sum to %g, want a finite value >= 0", what, total)
	}
	out := make([]float32, len(w))
	inv := 0.0
	if total > 0 {
		inv = 1 / total
	}
	for i, v := range w {
		if v < 0 || math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			return nil, 0, fmt.Errorf("step: %s %d is %g, want a finite value >= 0", what, i, v)
		}
		out[i] = float32(float64(v) * inv)
	}
	return out, total, nil
}
