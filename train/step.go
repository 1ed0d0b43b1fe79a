// Package train runs TinyGPT training: a whole optimizer step compiled into
// one MLX function (Step), the arrays it updates (State), the setup every
// run starts from (Setup), and a Trainer around them with schedules, data,
// evaluation, checkpoints and resume.
//
// MLX keeps per-thread state, so the package's entry points that build or
// evaluate arrays (NewStep, State's methods, Trainer.Run, the Evaluator,
// checkpoints, sampling) run their work on the MLX thread with mlx.Do and
// may be called from any goroutine.
package train

import (
	"fmt"
	"math"
	"slices"

	"github.com/posttrainllm/posttrainllm/mlx"
	"github.com/posttrainllm/posttrainllm/optim"
)

// LossFunc is a scalar training loss of parameters and one microbatch of
// inputs x and targets y, each [B, T] int32. It must build its result only
// from its arguments (and constants), so it traces into a compiled step.
type LossFunc func(params []*mlx.Array, x, y *mlx.Array) *mlx.Array

// StepOptions fix the shape of the traced step.
type StepOptions struct {
	// Accum is the number N of microbatches per optimizer update. The loop
	// over them unrolls at trace time, so N is part of the compiled function.
	Accum int
	// GradClip clips the averaged gradients to this global norm; 0 disables.
	GradClip float64
	// Compile traces the step once and replays it; false runs it eagerly
	// every call (the interpreted mode, for A/B comparisons).
	Compile bool
	// ComputeCopies makes the step take copies of the parameters cast to
	// ComputeDtype as inputs of their own: the loss is called with, and
	// differentiated with respect to, the copies, and the step emits the
	// next update's copies, cast from the new parameters inside the traced
	// function; the float32 masters feed only the optimizer. Why: each cast
	// then fuses into the optimizer's update kernel instead of launching a
	// kernel per parameter and step (docs/performance/gpu.md). Gradients are
	// unchanged; the copies cost parameters × ComputeDtype.Size() bytes. A
	// State carries them from one update to the next; Step.Run alone casts
	// the parameters itself every call.
	ComputeCopies bool
	// ComputeDtype is the dtype of the copies (a float type); it is read
	// only with ComputeCopies. mlx.Dtype's zero value is mlx.Bool, a real
	// dtype, hence the separate switch.
	ComputeDtype mlx.Dtype
	// Group is the data-parallel group the step averages over: after its
	// own microbatches, each rank's float32 gradients and loss are summed
	// across the group in one flattened all-reduce inside the traced
	// function and divided by its size, so every rank applies the same
	// update, that of the union of the ranks' batches. nil or a size-1
	// group leaves the step as it is without one.
	Group *mlx.Group

	// dependsOn picks, from what the microbatches so far accumulated
	// (every gradient, then the loss), what each microbatch after the first
	// waits for; nil picks all of it (see Step.body). Tests and the
	// accumulation benchmark set it to compare other orderings, the
	// unbounded formulation among them.
	dependsOn func(accumulated []*mlx.Array) []*mlx.Array
}

// RunStepOptions are the step options of a training run: its accumulation
// as configured (Plan.StepOptions takes the plan's instead), clipping and
// compile mode, and compute-dtype copies of the parameters when the model
// keeps float32 masters but computes in a lower precision (the copies save
// a cast kernel per parameter per step; see StepOptions.ComputeCopies).
func RunStepOptions(cfg Config) StepOptions {
	o := StepOptions{Accum: cfg.Accum, GradClip: cfg.GradClip, Compile: cfg.Compile}
	if m := cfg.Model; m.MasterFP32 && m.ComputeDtype() != m.ParamDtype() {
		o.ComputeCopies, o.ComputeDtype = true, m.ComputeDtype()
	}
	return o
}

// Step is one optimizer update as a pure function of its inputs:
//
//	(params, optimizer state, lr, x[N,B,T], y[N,B,T]) → (params', state', mean loss, grad norm)
//
// or, with StepOptions.ComputeCopies,
//
//	(params, copies, state, lr, x, y) → (params', copies', state', mean loss, grad norm)
//
// The learning rate is an input array, never a captured float, and N is
// fixed, so a run with a schedule and accumulation traces exactly once.
// A State applies a Step to the arrays it owns; Run is the bare function.
type Step struct {
	opt      optim.Optimizer
	opts     StepOptions
	nParams  int
	nState   int
	nCopies  int // nParams with ComputeCopies, else 0
	vag      *mlx.ValueAndGradFunc
	compiled *mlx.Closure
	traces   int // written on the MLX thread, read after mlx.Do returns
}

// StepResult holds a step's outputs. The caller owns them.
type StepResult struct {
	Params, State  []*mlx.Array
	Loss, GradNorm *mlx.Array
}

// stepOutputs are everything one update emits, copies included.
type stepOutputs struct {
	params, copies, state []*mlx.Array
	loss, gradNorm        *mlx.Array
}

// all lists the outputs, for evaluating or freeing them together.
func (o stepOutputs) all() []*mlx.Array {
	out := make([]*mlx.Array, 0, len(o.params)+len(o.copies)+len(o.state)+2)
	return append(append(append(append(out, o.params...), o.copies...), o.state...), o.loss, o.gradNorm)
}

// NewStep builds the step for a loss over nParams parameters and an
// optimizer whose state has nState arrays (len(opt.StateNames())).
func NewStep(loss LossFunc, opt optim.Optimizer, nParams, nState int, opts StepOptions) (*Step, error) {
	if opts.Accum < 1 {
		return nil, fmt.Errorf("train: accum = %d, want >= 1", opts.Accum)
	}
	if opts.GradClip < 0 || math.IsNaN(opts.GradClip) {
		return nil, fmt.Errorf("train: grad clip = %g, want >= 0 (0 disables)", opts.GradClip)
	}
	if opts.ComputeCopies && !opts.ComputeDtype.IsFloat() {
		return nil, fmt.Errorf("train: compute dtype %v for the parameter copies, want a float type", opts.ComputeDtype)
	}
	if !opts.ComputeCopies && opts.ComputeDtype != 0 {
		return nil, fmt.Errorf("train: compute dtype %v set without ComputeCopies", opts.ComputeDtype)
	}
	if nParams < 1 || nState < 0 {
		return nil, fmt.Errorf("train: step over %d parameters and %d state arrays, want >= 1 and >= 0", nParams, nState)
	}
	s := &Step{opt: opt, opts: opts, nParams: nParams, nState: nState}
	if opts.ComputeCopies {
		s.nCopies = nParams
	}
	argnums := make([]int, nParams)
	for i := range argnums {
		argnums[i] = i
	}
	err := mlx.Do(func() error {
		vag, err := mlx.ValueAndGrad(func(in []*mlx.Array) ([]*mlx.Array, error) {
			return []*mlx.Array{loss(in[:nParams], in[nParams], in[nParams+1])}, nil
		}, argnums...)
		if err != nil {
			return fmt.Errorf("train: building value_and_grad: %w", err)
		}
		s.vag = vag
		if opts.Compile {
			if s.compiled, err = mlx.Compile(s.body); err != nil {
				vag.Free()
				return fmt.Errorf("train: compiling the step: %w", err)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return s, nil
}

// Traces counts how often the step function's Go body ran: with Compile,
// the number of MLX traces (1 for a whole run with static shapes); without,
// the number of steps.
func (s *Step) Traces() int { return s.traces }

// Compiled reports whether the step is compiled.
func (s *Step) Compiled() bool { return s.compiled != nil }

// Free releases the step's MLX functions and trace cache. A nil step is
// a no-op.
func (s *Step) Free() {
	if s == nil {
		return
	}
	mlx.Do(func() error {
		s.compiled.Free()
		s.vag.Free()
		return nil
	})
}

// microbatch returns a[i] of an [N, B, T] array as [B, T].
func microbatch(a *mlx.Array, i int) *mlx.Array {
	b, t := a.Dim(1), a.Dim(2)
	return mlx.Squeeze(mlx.Slice(a, []int{i, 0, 0}, []int{i + 1, b, t}), 0)
}

// body is the traced function: N forward/backward passes, gradient
// averaging (over the microbatches, then across StepOptions.Group's
// ranks) and clipping, and the optimizer update; with ComputeCopies the
// passes take the copies and the body also emits the new parameters cast
// to ComputeDtype, which MLX's compiler fuses into the update's kernel.
//
// Microbatch i's tokens depend (mlx.Depends) on what microbatches 0 … i-1
// accumulated: every gradient and the loss. Nothing else orders the
// passes: MLX would be free to run all N forward passes before any
// backward pass and hold all N microbatches' activations at once. Waiting
// for the whole accumulated gradient finishes microbatch i-1's backward
// pass, weight gradients included, before microbatch i's forward pass
// starts; waiting for the loss too computes it then, rather than at the
// end of the step, when its inputs (the logits' softmax statistics) would
// have stayed alive for every microbatch. The step's peak is then one
// microbatch's plus the float32 accumulators, whatever N
// (docs/performance/cpu.md measures it against fewer dependencies).
func (s *Step) body(in []*mlx.Array) ([]*mlx.Array, error) {
	s.traces++
	P, C, S := s.nParams, s.nCopies, s.nState
	params, state := in[:P], in[P+C:P+C+S]
	lr, x, y := in[P+C+S], in[P+C+S+1], in[P+C+S+2]
	lossParams := params
	if C > 0 {
		lossParams = in[P : P+C]
	}
	n := s.opts.Accum
	var grads []*mlx.Array
	var lossSum *mlx.Array
	args := make([]*mlx.Array, P+2)
	copy(args, lossParams)
	for i := 0; i < n; i++ {
		args[P], args[P+1] = microbatch(x, i), microbatch(y, i)
		if i > 0 {
			deps := append(slices.Clip(grads), lossSum)
			if s.opts.dependsOn != nil {
				deps = s.opts.dependsOn(deps)
			}
			if len(deps) > 0 {
				d := mlx.Depends(args[P:P+2], deps)
				args[P], args[P+1] = d[0], d[1]
			}
		}
		vals, g, err := s.vag.Call(args...)
		if err != nil {
			return nil, err
		}
		if i == 0 {
			lossSum = vals[0]
			grads = make([]*mlx.Array, P)
			for j := range g {
				grads[j] = mlx.AsType(g[j], mlx.Float32)
			}
			continue
		}
		lossSum = mlx.Add(lossSum, vals[0])
		for j := range g {
			grads[j] = mlx.Add(grads[j], mlx.AsType(g[j], mlx.Float32))
		}
	}
	loss := lossSum
	if n > 1 {
		loss = mlx.MulScalar(lossSum, 1/float64(n))
		for j := range grads {
			grads[j] = mlx.MulScalar(grads[j], 1/float64(n))
		}
	}
	grads, loss = averageAcrossRanks(s.opts.Group, grads, loss)
	clipped, norm := optim.ClipByGlobalNorm(grads, s.opts.GradClip)
	newParams, newState, err := s.opt.Update(params, clipped, state, lr)
	if err != nil {
		return nil, err
	}
	out := make([]*mlx.Array, 0, P+C+S+2)
	out = append(out, newParams...)
	for i := 0; i < C; i++ {
		out = append(out, mlx.AsType(newParams[i], s.opts.ComputeDtype))
	}
	out = append(append(out, newState...), loss, norm)
	return out, nil
}

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
		out, err := s.apply(params, nil, state, lr, x, y)
		if err != nil {
			return err
		}
		mlx.Free(out.copies...)
		res = StepResult{Params: out.params, State: out.state, Loss: out.loss, GradNorm: out.gradNorm}
		return nil
	})
	return res, err
}

// apply checks the inputs and runs the step on the MLX thread. copies are
// the compute-dtype copies of params; nil casts them here. Inputs are not
// freed.
func (s *Step) apply(params, copies, state []*mlx.Array, lr, x, y *mlx.Array) (stepOutputs, error) {
	if len(params) != s.nParams || len(state) != s.nState {
		return stepOutputs{}, fmt.Errorf("train: step got %d params and %d state arrays, built for %d and %d",
			len(params), len(state), s.nParams, s.nState)
	}
	if err := s.checkInputs(lr, x, y); err != nil {
		return stepOutputs{}, err
	}
	var cast []*mlx.Array
	if s.nCopies > 0 && copies == nil {
		cast = make([]*mlx.Array, len(params))
		for i, p := range params {
			cast[i] = mlx.AsType(p, s.opts.ComputeDtype)
		}
		copies = cast
	}
	if len(copies) != s.nCopies {
		return stepOutputs{}, fmt.Errorf("train: step got %d parameter copies, built for %d", len(copies), s.nCopies)
	}
	in := make([]*mlx.Array, 0, s.nParams+s.nCopies+s.nState+3)
	in = append(append(append(append(in, params...), copies...), state...), lr, x, y)
	out, err := s.call(in)
	// The outputs' graph holds what it needs of the inputs.
	mlx.Free(cast...)
	if err != nil {
		return stepOutputs{}, fmt.Errorf("train: step: %w", err)
	}
	P, C, S := s.nParams, s.nCopies, s.nState
	return stepOutputs{params: out[:P:P], copies: out[P : P+C : P+C], state: out[P+C : P+C+S : P+C+S],
		loss: out[P+C+S], gradNorm: out[P+C+S+1]}, nil
}

// checkInputs refuses a learning rate or batch that would fail inside the
// traced function or trace it again: lr must be a 0-D float32 array, x and
// y int32 arrays of one [Accum, B, T] shape.
func (s *Step) checkInputs(lr, x, y *mlx.Array) error {
	if err := lr.Err(); err != nil {
		return fmt.Errorf("train: lr: %w", err)
	}
	if lr.Dtype() != mlx.Float32 || lr.Ndim() != 0 {
		return fmt.Errorf("train: lr is a %v array of shape %v, want a 0-D float32 array (mlx.Scalar(lr, mlx.Float32))",
			lr.Dtype(), lr.Shape())
	}
	for _, a := range []struct {
		name string
		a    *mlx.Array
	}{{"x", x}, {"y", y}} {
		if err := a.a.Err(); err != nil {
			return fmt.Errorf("train: batch %s: %w", a.name, err)
		}
		if a.a.Ndim() != 3 || a.a.Dim(0) != s.opts.Accum {
			return fmt.Errorf("train: batch %s has shape %v, want [accum=%d, batch, context]", a.name, a.a.Shape(), s.opts.Accum)
		}
		if a.a.Dtype() != mlx.Int32 {
			return fmt.Errorf("train: batch %s is %v, want int32 token ids", a.name, a.a.Dtype())
		}
	}
	if !slices.Equal(x.Shape(), y.Shape()) {
		return fmt.Errorf("train: batch x has shape %v, y %v; want the same", x.Shape(), y.Shape())
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
