package step

import (
	"fmt"
	"slices"

	"github.com/posttrainllm/posttrainllm/mlx"
)

// Run applies one update. x and y are [Accum, B, T] int32; lr is a 0-D
// float32 array. Inputs are not freed: the caller releases the old arrays
// once it has the new ones. Outputs are lazy; evaluate them (mlx.AsyncEval)
// before the next call to keep the graph short. A State does all of this.
//
// With ComputeCopies, Run casts the parameters to the compute dtype itself
// (outside the compiled function, so without a new trace) and drops the
// copies the step emits: the cast kernels the copies save are spent here.
// A State carries the emitted copies into its next update instead.
func (s *Step) Run(params, state []*mlx.Array, lr, x, y *mlx.Array) (StepResult, error) {
	var res StepResult
	err := mlx.Do(func() error {
		if s.weighted {
			return fmt.Errorf("step: Run on a weighted step; use RunWeighted")
		}
		out, err := s.apply(params, nil, nil, state, lr, x, y)
		if err != nil {
			return err
		}
		mlx.Free(out.copies...)
		res = StepResult{Params: out.params, State: out.state, Loss: out.loss, GradNorm: out.gradNorm}
		return nil
	})
	return res, err
}

// RunWeighted applies one update of a weighted step (WeightedInputs):
// Run with the frozen arrays and the loss weights w, [Accum, B, T]
// float32, already divided by the update's weight total. Its loss is
// Σ w·loss over the update.
func (s *Step) RunWeighted(params, frozen, state []*mlx.Array, lr, x, y, w *mlx.Array) (StepResult, error) {
	var res StepResult
	err := mlx.Do(func() error {
		if !s.weighted {
			return fmt.Errorf("step: RunWeighted on an unweighted step; use Run")
		}
		out, err := s.apply(params, nil, frozen, state, lr, x, y, w)
		if err != nil {
			return err
		}
		mlx.Free(out.copies...)
		res = StepResult{Params: out.params, State: out.state, Loss: out.loss, GradNorm: out.gradNorm}
		return nil
	})
	return res, err
}

// apply checks the inputs and runs the step on the MLX thread, on
// per-parameter arrays: with a flat layout it packs them into groups
// first and returns the outputs as per-parameter views. copies are the
// compute-dtype copies of params; nil casts them here. batch is x, y
// and, for a weighted step, w. Inputs are not freed.
func (s *Step) apply(params, copies, frozen, state []*mlx.Array, lr *mlx.Array, batch ...*mlx.Array) (stepOutputs, error) {
	if len(params) != s.nParams || len(state) != s.nState || len(frozen) != s.nFrozen {
		return stepOutputs{}, fmt.Errorf("step: step got %d params, %d frozen and %d state arrays, built for %d, %d and %d",
			len(params), len(frozen), len(state), s.nParams, s.nFrozen, s.nState)
	}
	if copies != nil && len(copies) != s.nCopies {
		return stepOutputs{}, fmt.Errorf("step: step got %d parameter copies, built for %d", len(copies), s.nCopies)
	}
	if err := firstErr(params, state); err != nil {
		return stepOutputs{}, fmt.Errorf("step: step: %w", err)
	}
	flat, err := s.layoutFor(params)
	if err != nil || flat == nil {
		if err != nil {
			return stepOutputs{}, err
		}
		return s.applyLayout(params, copies, frozen, state, lr, batch...)
	}
	packed := flat.Pack(params)
	packedState := flat.PackState(state)
	var packedCopies []*mlx.Array
	if copies != nil {
		packedCopies = flat.Pack(copies)
	}
	out, err := s.applyLayout(packed, packedCopies, frozen, packedState, lr, batch...)
	// The outputs' graph holds what it needs of the packed inputs; the
	// counter is the caller's own array.
	mlx.Free(packed...)
	mlx.Free(packedCopies...)
	mlx.Free(packedState[1:]...)
	if err != nil {
		return stepOutputs{}, err
	}
	views := stepOutputs{params: flat.Unpack(out.params), state: flat.UnpackState(out.state), loss: out.loss, gradNorm: out.gradNorm, aux: out.aux}
	if len(out.copies) > 0 {
		views.copies = flat.Unpack(out.copies)
	}
	mlx.Free(out.params...)
	mlx.Free(out.copies...)
	mlx.Free(out.state[1:]...)
	return views, nil
}

// checkBatch refuses a learning rate or batch that would fail inside the
// traced function or trace it again: lr must be a 0-D float32 array; the
// batch x and y, int32 arrays of one [Accum, B, T] shape, or the window
// form (windowed): 1-D int32 stream, shifted stream and offsets and
// [Accum, B] int32 starts.
func (s *Step) checkBatch(lr *mlx.Array, batch []*mlx.Array) error {
	if err := lr.Err(); err != nil {
		return fmt.Errorf("step: lr: %w", err)
	}
	if lr.Dtype() != mlx.Float32 || lr.Ndim() != 0 {
		return fmt.Errorf("step: lr is a %v array of shape %v, want a 0-D float32 array (mlx.Scalar(lr, mlx.Float32))",
			lr.Dtype(), lr.Shape())
	}
	if len(batch) < 2 {
		return fmt.Errorf("step: step got %d batch arrays, want x and y", len(batch))
	}
	type input struct {
		name string
		a    *mlx.Array
		want string // the shape wanted, for the error
		ok   func(a *mlx.Array) bool
	}
	accumFirst := func(ndim int) func(a *mlx.Array) bool {
		return func(a *mlx.Array) bool { return a.Ndim() == ndim && a.Dim(0) == s.opts.Accum }
	}
	vector := func(a *mlx.Array) bool { return a.Ndim() == 1 }
	inputs := []input{
		{"x", batch[0], fmt.Sprintf("[accum=%d, batch, context]", s.opts.Accum), accumFirst(3)},
		{"y", batch[1], fmt.Sprintf("[accum=%d, batch, context]", s.opts.Accum), accumFirst(3)},
	}
	if s.windowed(batch) {
		inputs = []input{
			{"token stream", batch[0], "[tokens]", vector},
			{"shifted token stream", batch[1], "[tokens]", vector},
			{"window offsets", batch[2], "[context]", vector},
			{"window starts", batch[3], fmt.Sprintf("[accum=%d, batch]", s.opts.Accum), accumFirst(2)},
		}
	}
	for _, in := range inputs {
		if err := in.a.Err(); err != nil {
			return fmt.Errorf("step: batch %s: %w", in.name, err)
		}
		if !in.ok(in.a) {
			return fmt.Errorf("step: batch %s has shape %v, want %s", in.name, in.a.Shape(), in.want)
		}
		if in.a.Dtype() != mlx.Int32 {
			return fmt.Errorf("step: batch %s is %v, want int32", in.name, in.a.Dtype())
		}
	}
	if x, y := batch[0], batch[1]; !s.windowed(batch) && !slices.Equal(x.Shape(), y.Shape()) {
		return fmt.Errorf("step: batch x has shape %v, y %v; want the same", x.Shape(), y.Shape())
	}
	return nil
}

// checkWeights refuses loss weights that are not float32 of x's shape.
func checkWeights(w, x *mlx.Array) error {
	if w == nil {
		return fmt.Errorf("step: a weighted step needs loss weights")
	}
	if err := w.Err(); err != nil {
		return fmt.Errorf("step: loss weights: %w", err)
	}
	if w.Dtype() != mlx.Float32 || !slices.Equal(w.Shape(), x.Shape()) {
		return fmt.Errorf("step: loss weights are %v of shape %v, want float32 of the batch's shape %v", w.Dtype(), w.Shape(), x.Shape())
	}
	return nil
}

// call runs the body, compiled or interpreted, on the flat inputs.
func (s *Step) call(in []*mlx.Array) ([]*mlx.Array, error) {
	var out []*mlx.Array
	var err error
	if s.compiled != nil {
		out, err = s.compiled.Call(in...)
	} else {
		out = mlx.Run(func() []*mlx.Array {
			o, e := s.body(in)
			err = e
			return o
		})
		for _, a := range out {
			if err == nil {
				err = a.Err()
			}
		}
	}
	if err != nil {
		mlx.Free(out...)
		return nil, err
	}
	return out, nil
}
