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
}

// Step is one optimizer update as a pure function of its inputs:
//
//	(params, optimizer state, lr, x[N,B,T], y[N,B,T]) → (params', state', mean loss, grad norm)
//
// The learning rate is an input array, never a captured float, and N is
// fixed, so a run with a schedule and accumulation traces exactly once.
type Step struct {
	opt      optim.Optimizer
	opts     StepOptions
	nParams  int
	nState   int
	vag      *mlx.ValueAndGradFunc
	compiled *mlx.Closure
	traces   int
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
	s := &Step{opt: opt, opts: opts, nParams: nParams, nState: nState}
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
		s.compiled, err = mlx.Compile(s.body, false)
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

// Free releases the step's MLX functions and trace cache.
func (s *Step) Free() {
	s.compiled.Free()
	s.vag.Free()
}

// microbatch returns a[i] of an [N, B, T] array as [B, T].
func microbatch(a *mlx.Array, i int) *mlx.Array {
	b, t := a.Dim(1), a.Dim(2)
	return mlx.Squeeze(mlx.Slice(a, []int{i, 0, 0}, []int{i + 1, b, t}), 0)
}

// body is the traced function: N forward/backward passes, gradient
// averaging and clipping, and the optimizer update.
func (s *Step) body(in []*mlx.Array) ([]*mlx.Array, error) {
	s.traces++
	P, S := s.nParams, s.nState
	params, state := in[:P], in[P:P+S]
	lr, x, y := in[P+S], in[P+S+1], in[P+S+2]
	n := s.opts.Accum
	var grads []*mlx.Array
	var lossSum *mlx.Array
	args := make([]*mlx.Array, P+2)
	copy(args, params)
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
	out := make([]*mlx.Array, 0, P+S+2)
	out = append(append(append(out, newParams...), newState...), loss, norm)
	return out, nil
}

// Run applies one update. x and y are [Accum, B, T] int32; lr is a 0-D
// float32 array. Inputs are not freed: the caller releases the old arrays
// once it has the new ones. Outputs are lazy; evaluate them (mlx.AsyncEval)
// before the next call to keep the graph short.
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
	in := make([]*mlx.Array, 0, s.nParams+s.nState+3)
	in = append(append(append(in, params...), state...), lr, x, y)
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
		return StepResult{}, fmt.Errorf("train: step: %w", err)
	}
	P, S := s.nParams, s.nState
	return StepResult{Params: out[:P:P], State: out[P : P+S : P+S], Loss: out[P+S], GradNorm: out[P+S+1]}, nil
}
