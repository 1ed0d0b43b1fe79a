// Package train runs TinyGPT training: a whole optimizer step compiled into
// one MLX function (Step), and a Trainer around it with schedules, data,
// evaluation, checkpoints and resume.
package train

import (
	"fmt"

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
	// ComputeCopies makes the step carry copies of the parameters cast to
	// ComputeDtype from one update to the next: the loss is called with, and
	// differentiated with respect to, the copies, and the step emits the
	// next update's copies, cast from the new parameters inside the traced
	// function. The parameters themselves (the float32 masters) feed only
	// the optimizer. Why: on a GPU a small model's step is bound by kernel
	// launches, and a loss that casts its masters costs one cast kernel per
	// parameter per step; emitted from the step instead, each cast fuses
	// into the optimizer's elementwise update kernel, which already writes
	// the new parameter. The numbers do not change: the gradient with
	// respect to a copy is the one the cast's VJP would pass to the master,
	// before the step's cast of every gradient to float32. Casting a
	// parameter that already has ComputeDtype is free (a new handle to the
	// same array). The copies cost parameters × ComputeDtype.Size() bytes.
	ComputeCopies bool
	// ComputeDtype is the dtype of the copies (a float type); it is read
	// only with ComputeCopies. mlx.Dtype's zero value is mlx.Bool, a real
	// dtype, hence the separate switch.
	ComputeDtype mlx.Dtype
}

// RunStepOptions are the step options of a training run: its accumulation,
// clipping and compile mode, and compute-dtype copies of the parameters
// when the model keeps float32 masters but computes in a lower precision
// (the copies save a cast kernel per parameter per step; see
// StepOptions.ComputeCopies).
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
// Run keeps the copies between calls (see Run), so callers see the first
// form either way.
type Step struct {
	opt      optim.Optimizer
	opts     StepOptions
	nParams  int
	nState   int
	nCopies  int // nParams with ComputeCopies, else 0
	vag      *mlx.ValueAndGradFunc
	compiled *mlx.Closure
	traces   int
	// copies are the compute-dtype copies the last Run emitted, valid for
	// the parameters copiesOf (that Run's StepResult.Params, by pointer).
	copies   []*mlx.Array
	copiesOf []*mlx.Array
}

// StepResult holds a step's outputs. The caller owns them.
type StepResult struct {
	Params, State  []*mlx.Array
	Loss, GradNorm *mlx.Array
}

// NewStep builds the step for a loss over nParams parameters and an
// optimizer whose state has nState arrays.
func NewStep(loss LossFunc, opt optim.Optimizer, nParams, nState int, opts StepOptions) (*Step, error) {
	if opts.Accum < 1 {
		return nil, fmt.Errorf("train: accum = %d, want >= 1", opts.Accum)
	}
	if opts.GradClip < 0 {
		return nil, fmt.Errorf("train: grad clip = %g, want >= 0 (0 disables)", opts.GradClip)
	}
	if opts.ComputeCopies && !opts.ComputeDtype.IsFloat() {
		return nil, fmt.Errorf("train: compute dtype %v for the parameter copies, want a float type", opts.ComputeDtype)
	}
	if !opts.ComputeCopies && opts.ComputeDtype != 0 {
		return nil, fmt.Errorf("train: compute dtype %v set without ComputeCopies", opts.ComputeDtype)
	}
	s := &Step{opt: opt, opts: opts, nParams: nParams, nState: nState}
	if opts.ComputeCopies {
		s.nCopies = nParams
	}
	argnums := make([]int, nParams)
	for i := range argnums {
		argnums[i] = i
	}
	vag, err := mlx.ValueAndGrad(func(in []*mlx.Array) ([]*mlx.Array, error) {
		return []*mlx.Array{loss(in[:nParams], in[nParams], in[nParams+1])}, nil
	}, argnums...)
	if err != nil {
		return nil, fmt.Errorf("train: building value_and_grad: %w", err)
	}
	s.vag = vag
	if opts.Compile {
		s.compiled, err = mlx.Compile(s.body)
		if err != nil {
			vag.Free()
			return nil, fmt.Errorf("train: compiling the step: %w", err)
		}
	}
	return s, nil
}

// Traces counts how often the step function's Go body ran: with Compile,
// the number of MLX traces (1 for a whole run with static shapes); without,
// the number of steps.
func (s *Step) Traces() int { return s.traces }

// Compiled reports whether the step is compiled.
func (s *Step) Compiled() bool { return s.compiled != nil }

// Copies returns the compute-dtype parameter copies the last Run emitted
// (nil without ComputeCopies or before the first Run). The Step owns them:
// do not free them, but evaluate them with the step's results (e.g. in the
// same mlx.AsyncEval) so the next step's inputs are computed in this one.
func (s *Step) Copies() []*mlx.Array { return s.copies }

// Free releases the step's MLX functions, trace cache and parameter copies.
func (s *Step) Free() {
	s.compiled.Free()
	s.vag.Free()
	s.dropCopies()
}

// dropCopies frees the cached copies.
func (s *Step) dropCopies() {
	mlx.Free(s.copies...)
	s.copies, s.copiesOf = nil, nil
}

// cachedCopies returns the copies of the last Run if params are exactly
// that Run's output parameters, all still live, and nil otherwise. Pointer
// identity is sound because an mlx.Array is immutable: only Free changes
// it, and Valid sees that; a cached pointer also keeps its Array from being
// collected and its address reused.
func (s *Step) cachedCopies(params []*mlx.Array) []*mlx.Array {
	if len(s.copiesOf) != len(params) {
		return nil
	}
	for i, p := range params {
		if p != s.copiesOf[i] || !p.Valid() || !s.copies[i].Valid() {
			return nil
		}
	}
	return s.copies
}

// microbatch returns a[i] of an [N, B, T] array as [B, T].
func microbatch(a *mlx.Array, i int) *mlx.Array {
	b, t := a.Dim(1), a.Dim(2)
	return mlx.Squeeze(mlx.Slice(a, []int{i, 0, 0}, []int{i + 1, b, t}), 0)
}

// body is the traced function: N forward/backward passes, gradient
// averaging and clipping, and the optimizer update; with ComputeCopies the
// passes take the copies and the body also emits the new parameters cast
// to ComputeDtype, which MLX's compiler fuses into the update's kernel.
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
// before the next call to keep the graph short.
//
// With ComputeCopies, Run keeps the copies it emits (see Copies) together
// with the result's Params. Called next with exactly those Params (the same
// *mlx.Array values, still live) it passes the kept copies; called with
// any other parameters it casts them itself, outside the compiled function
// (same input dtypes, so no new trace), which costs the kernels the copies
// save. Either way the previous copies are freed once replaced. Copies
// created inside an mlx.Scope are freed with it, so a Run inside a scope
// that closes before the next Run always takes the casting path.
func (s *Step) Run(params, state []*mlx.Array, lr, x, y *mlx.Array) (StepResult, error) {
	if len(params) != s.nParams || len(state) != s.nState {
		return StepResult{}, fmt.Errorf("train: step got %d params and %d state arrays, built for %d and %d",
			len(params), len(state), s.nParams, s.nState)
	}
	for _, a := range []*mlx.Array{x, y} {
		if err := a.Err(); err != nil {
			return StepResult{}, err
		}
		if a.Ndim() != 3 || a.Dim(0) != s.opts.Accum {
			return StepResult{}, fmt.Errorf("train: batch shape %v, want [accum=%d, batch, context]", a.Shape(), s.opts.Accum)
		}
	}
	var copies, cast []*mlx.Array
	if s.nCopies > 0 {
		if copies = s.cachedCopies(params); copies == nil {
			cast = make([]*mlx.Array, len(params))
			for i, p := range params {
				cast[i] = mlx.AsType(p, s.opts.ComputeDtype)
			}
			copies = cast
		}
	}
	in := make([]*mlx.Array, 0, s.nParams+s.nCopies+s.nState+3)
	in = append(append(append(append(in, params...), copies...), state...), lr, x, y)
	out, err := s.call(in)
	// The outputs' graph holds what it needs of the inputs.
	mlx.Free(cast...)
	if err != nil {
		return StepResult{}, fmt.Errorf("train: step: %w", err)
	}
	P, C, S := s.nParams, s.nCopies, s.nState
	res := StepResult{Params: out[:P:P], State: out[P+C : P+C+S : P+C+S], Loss: out[P+C+S], GradNorm: out[P+C+S+1]}
	if C > 0 {
		s.dropCopies()
		s.copies = out[P : P+C : P+C]
		s.copiesOf = append([]*mlx.Array(nil), res.Params...)
	}
	return res, nil
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
