package step

import (
	"fmt"

	"github.com/posttrainllm/posttrainllm/mlx"
	"github.com/posttrainllm/posttrainllm/model"
	"github.com/posttrainllm/posttrainllm/optim"
)

// Inputs names the form of the batch a step takes beside its arrays.
type Inputs int

// The batch forms of a step. Every form starts with the inputs x and
// their next-token targets y, [N, B, T] int32 each.
const (
	// TokenInputs are x and y alone (or their windows in a token stream,
	// Batch.Starts); the step's loss is the mean over the microbatches.
	TokenInputs Inputs = iota
	// WeightedInputs add per-target loss weights w [N, B, T] float32,
	// already divided by the update's weight total (Batch.W,
	// Batch.WeightSum): the loss is Σ w·loss, summed over the microbatches.
	WeightedInputs
	// PackedInputs are WeightedInputs over packed rows, with the segment
	// of every position (Batch.Seg, [N, B, T] int32) as a fourth input.
	PackedInputs
	// RowInputs add, after the token mask w ([N, B, T] float32, 1 where a
	// target counts, not normalised), per-row inputs [N, B] float32: the
	// row weights divided by the update's total (Batch.RowW) first, then
	// Layout.RowInputs more (Batch.RowInputs), then Layout.PositionInputs
	// per-position inputs [N, B, T] float32 (Batch.PositionInputs: an
	// online objective's old log-probability of each target, say). The
	// loss is Σ rowWeight·loss.
	RowInputs
)

// String names the form as the Layout's errors do.
func (i Inputs) String() string {
	switch i {
	case TokenInputs:
		return "tokens"
	case WeightedInputs:
		return "weighted tokens"
	case PackedInputs:
		return "packed weighted tokens"
	case RowInputs:
		return "rows"
	}
	return fmt.Sprintf("Inputs(%d)", int(i))
}

// Layout is what a step takes and emits beside the learning rate: the
// arrays it differentiates and updates (Trainable), the arrays it reads
// without either (Frozen: a fine-tune's base weights under adapters), the
// optimizer's state arrays (State, len(opt.StateNames())), the form of
// its batch (Inputs, with RowInputs per-row inputs after the row weights
// and PositionInputs per-position inputs after them for the RowInputs
// form) and the auxiliary sums its loss returns beside
// the loss (Aux names them, in order: metrics measured in the same
// forward pass, summed and reduced like the loss, StepResult.Aux and
// State.IntervalAux).
type Layout struct {
	Trainable, Frozen, State int
	Inputs                   Inputs
	RowInputs                int
	PositionInputs           int
	Aux                      []string
}

// check refuses counts out of range and options that contradict the form.
func (l Layout) check() error {
	if l.Trainable < 1 || l.Frozen < 0 || l.State < 0 {
		return fmt.Errorf("step: step over %d trainable, %d frozen and %d state arrays, want >= 1, >= 0 and >= 0", l.Trainable, l.Frozen, l.State)
	}
	if l.Inputs < TokenInputs || l.Inputs > RowInputs {
		return fmt.Errorf("step: step inputs %v, want tokens, weighted, packed or rows", l.Inputs)
	}
	if l.Inputs == TokenInputs && l.Frozen > 0 {
		return fmt.Errorf("step: step over %d frozen arrays with token inputs; frozen arrays need weighted, packed or row inputs", l.Frozen)
	}
	if l.RowInputs < 0 || (l.RowInputs > 0 && l.Inputs != RowInputs) {
		return fmt.Errorf("step: %d row inputs for a step of %v, want 0 (row inputs need the rows form)", l.RowInputs, l.Inputs)
	}
	if l.PositionInputs < 0 || (l.PositionInputs > 0 && l.Inputs != RowInputs) {
		return fmt.Errorf("step: %d position inputs for a step of %v, want 0 (position inputs need the rows form)", l.PositionInputs, l.Inputs)
	}
	return nil
}

// Microbatch is one microbatch's inputs as a step's loss sees them: the
// [B, T] slices of the update's batch arrays, nil where the layout's form
// has none; Rows are a RowInputs step's [B] per-row inputs, the row
// weights first, and Positions its [B, T] per-position inputs.
type Microbatch struct {
	X, Y      *mlx.Array // inputs and targets, int32
	W         *mlx.Array // loss weights, or the token mask of a row step
	Seg       *mlx.Array // segments of packed rows
	Rows      []*mlx.Array
	Positions []*mlx.Array
}

// Loss is a step's loss of one microbatch over the trainable and frozen
// arrays (in the order of the Layout's counts). It returns the scalar
// loss and the auxiliary sums Layout.Aux names. For TokenInputs the loss
// is the microbatch's mean, which the step averages over the
// microbatches; for the other forms it is Σ weight·loss with the weights
// already normalised over the whole update, which the step sums, so the
// update's loss is the mean over its counted targets (or rows) whatever
// each microbatch holds. It must build its results only from its
// arguments (and constants), so it traces into the compiled step.
type Loss func(trainable, frozen []*mlx.Array, mb Microbatch) (loss *mlx.Array, aux []*mlx.Array)

// MeanLoss is the Loss of a TokenInputs step from a mean loss of
// parameters and one microbatch's x and y, such as model.Transformer.Loss.
func MeanLoss(f func(params []*mlx.Array, x, y *mlx.Array) *mlx.Array) Loss {
	return func(params, _ []*mlx.Array, mb Microbatch) (*mlx.Array, []*mlx.Array) {
		return f(params, mb.X, mb.Y), nil
	}
}

// NewStep builds the step of loss under optimizer opt for layout l: the
// one constructor of every step, pretraining's (TokenInputs), a
// fine-tune's over frozen base weights (WeightedInputs, PackedInputs) and
// a preference or reinforcement objective's over rows (RowInputs). With
// StepOptions.Compile it is compiled here; it traces on first use.
func NewStep(loss Loss, opt optim.Optimizer, l Layout, opts StepOptions) (*Step, error) {
	if err := l.check(); err != nil {
		return nil, err
	}
	P, F, nAux := l.Trainable, l.Frozen, len(l.Aux)
	flat := func(in []*mlx.Array) []*mlx.Array {
		b := in[P+F:]
		mb := Microbatch{X: b[0], Y: b[1]}
		switch l.Inputs {
		case WeightedInputs:
			mb.W = b[2]
		case PackedInputs:
			mb.W, mb.Seg = b[2], b[3]
		case RowInputs:
			r := 3 + 1 + l.RowInputs
			mb.W, mb.Rows, mb.Positions = b[2], b[3:r], b[r:r+l.PositionInputs]
		}
		v, aux := loss(in[:P], in[P:P+F], mb)
		if len(aux) != nAux {
			err := fmt.Errorf("step: the loss returned %d auxiliary sums, the step's layout names %d (%v)", len(aux), nAux, l.Aux)
			return []*mlx.Array{mlx.ErrorArray(err)}
		}
		return append([]*mlx.Array{v}, aux...)
	}
	return newStep(flat, opt, l, opts)
}

// NewModelStep is NewStep for m's training loss (m.Loss) over all its
// parameters, with opt's state, passing each layer's q/k/v weights stacked
// where the model's formulation wants them so and the layout allows
// (StepOptions.StackedParams from m.StackedQKV: on a GPU): the step a
// pretraining run uses.
func NewModelStep(m *model.Transformer, opt optim.Optimizer, opts StepOptions) (*Step, error) {
	opts.StackedParams = m.StackedQKV()
	return NewStep(MeanLoss(m.Loss), opt, Layout{Trainable: len(m.Specs), State: len(opt.StateNames())}, opts)
}

// Layout returns the layout the step was built for.
func (s *Step) Layout() Layout { return s.layout }
