package train

import (
	"errors"
	"fmt"
	"math"

	"github.com/posttrainllm/posttrainllm/mlx"
	"github.com/posttrainllm/posttrainllm/optim"
)

// RowLossFunc is the loss of a row step (NewRowStep): a loss of whole
// rows rather than of single tokens, such as a preference loss of
// sequence log-probabilities. It takes the trainable and frozen arrays as
// a WeightedLossFunc does, one microbatch's inputs x and targets y
// ([B, T] int32), the token mask ([B, T] float32: 1 where a target
// counts, 0 for prompt and padding; not normalised) and the per-row
// inputs ([B] float32 each): rows[0] the row weights, already divided by
// the update's weight total (Batch.RowW, Batch.WeightSum), then the
// caller's own row inputs (Batch.RowInputs).
//
// It returns Σ rowWeight·loss over the microbatch's rows, so that the sum
// over the microbatches (and the ranks of a data-parallel run) is the
// mean over the whole update's weighted rows, and auxiliary sums built
// the same way (Σ rowWeight·metric), which the step sums and reduces like
// the loss and emits beside it (StepResult.Aux, State.Stats): metrics
// measured in the same forward pass, for free.
type RowLossFunc func(trainable, frozen []*mlx.Array, x, y, mask *mlx.Array, rows []*mlx.Array) (loss *mlx.Array, aux []*mlx.Array)

// NewRowStep builds the step of a row loss over nTrainable parameters,
// which the optimizer (with nState state arrays) updates, and nFrozen
// frozen arrays, as NewWeightedStep does. Each update takes the token
// mask as its weights, the row weights and nRowInputs more per-row inputs
// ([Accum, B] float32 each), and the loss returns nAux auxiliary sums.
// The inputs of a row are whatever the caller computes per row once, such
// as a frozen reference model's log-probabilities; they are inputs of the
// compiled step like the tokens, so new values never trace it again.
func NewRowStep(loss RowLossFunc, opt optim.Optimizer, nTrainable, nFrozen, nState, nRowInputs, nAux int, opts StepOptions) (*Step, error) {
	if nFrozen < 0 || nRowInputs < 0 || nAux < 0 {
		return nil, fmt.Errorf("train: row step over %d frozen arrays, %d row inputs and %d auxiliary sums, want >= 0 each", nFrozen, nRowInputs, nAux)
	}
	P, F, R := nTrainable, nFrozen, 1+nRowInputs
	s, err := newStep(func(in []*mlx.Array) []*mlx.Array {
		b := in[P+F:]
		l, aux := loss(in[:P], in[P:P+F], b[0], b[1], b[2], b[3:3+R])
		if len(aux) != nAux {
			err := fmt.Errorf("train: row loss returned %d auxiliary sums, the step was built for %d", len(aux), nAux)
			return []*mlx.Array{mlx.ErrorArray(err)}
		}
		return append([]*mlx.Array{l}, aux...)
	}, opt, nTrainable, nFrozen, nState, true, opts)
	if err != nil {
		return nil, err
	}
	s.nRows, s.nAux = R, nAux
	return s, nil
}

// RowInputs is the number of per-row inputs a row step takes after the
// row weights (0 for other steps).
func (s *Step) RowInputs() int { return max(0, s.nRows-1) }

// Aux is the number of auxiliary sums a row step emits (0 for other
// steps).
func (s *Step) Aux() int { return s.nAux }

// RunRows applies one update of a row step (NewRowStep): Run with the
// frozen arrays, the token mask ([Accum, B, T] float32) and the per-row
// inputs ([Accum, B] float32 each), the row weights first, already divided
// by the update's weight total. Its loss is Σ rowWeight·loss over the
// update; Aux holds the auxiliary sums.
func (s *Step) RunRows(params, frozen, state []*mlx.Array, lr, x, y, mask *mlx.Array, rows ...*mlx.Array) (StepResult, error) {
	var res StepResult
	err := mlx.Do(func() error {
		if s.nRows == 0 {
			return fmt.Errorf("train: RunRows on a step without row inputs; use Run or RunWeighted")
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

// checkRowInputs refuses a row step's batch without its row inputs, or
// with row inputs that are not float32 [Accum, B] for x's [Accum, B, T];
// and row inputs given to a step that does not take them.
func (s *Step) checkRowInputs(batch []*mlx.Array) error {
	if s.nRows == 0 {
		return nil
	}
	if len(batch) != 3+s.nRows {
		return fmt.Errorf("train: a row step's batch needs x, y, the token mask and %d row inputs, got %d arrays", s.nRows, len(batch))
	}
	x := batch[0]
	for k, a := range batch[3:] {
		if a == nil {
			return fmt.Errorf("train: row input %d is missing", k)
		}
		if err := a.Err(); err != nil {
			return fmt.Errorf("train: row input %d: %w", k, err)
		}
		if a.Dtype() != mlx.Float32 || a.Ndim() != 2 || a.Dim(0) != x.Dim(0) || a.Dim(1) != x.Dim(1) {
			return fmt.Errorf("train: row input %d is %v of shape %v, want float32 [accum=%d, batch=%d]", k, a.Dtype(), a.Shape(), x.Dim(0), x.Dim(1))
		}
	}
	return nil
}

// rowInputs returns a row step's per-row inputs of b, the row weights
// normalised by the update's total (Batch.RowW, Batch.WeightSum) first,
// and that total; nothing for other steps, which must get no row inputs.
func (s *State) rowInputs(b Batch) ([][]float32, float64, error) {
	if s.step.nRows == 0 {
		if b.RowW != nil || b.RowInputs != nil {
			return nil, 0, errors.New("train: batch with row weights or row inputs for a step that takes none (NewRowStep)")
		}
		return nil, 0, nil
	}
	if b.RowW == nil || b.W == nil {
		return nil, 0, errors.New("train: a row step's batch needs the token mask (Batch.W) and row weights (Batch.RowW)")
	}
	if len(b.RowInputs) != s.step.nRows-1 {
		return nil, 0, fmt.Errorf("train: batch with %d row inputs for a row step of %d", len(b.RowInputs), s.step.nRows-1)
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
		return nil, 0, fmt.Errorf("train: %ss sum to %g, want a finite value >= 0", what, total)
	}
	out := make([]float32, len(w))
	inv := 0.0
	if total > 0 {
		inv = 1 / total
	}
	for i, v := range w {
		if v < 0 || math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			return nil, 0, fmt.Errorf("train: %s %d is %g, want a finite value >= 0", what, i, v)
		}
		out[i] = float32(float64(v) * inv)
	}
	return out, total, nil
}
