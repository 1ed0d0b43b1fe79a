package pretrain

import (
	"fmt"

	"github.com/posttrainllm/posttrainllm/mlx"
	"github.com/posttrainllm/posttrainllm/model"
	"github.com/posttrainllm/posttrainllm/optim"
	"github.com/posttrainllm/posttrainllm/step"
)

// sophiaKeySalt mixes the update number into the run's seed for the
// estimate's sampling key.
const sophiaKeySalt = 0x9e3779b97f4a7c15

// SophiaEstimator refreshes SophiaG's Hessian estimate every HessianEvery
// updates with the Gauss-Newton-Bartlett estimator: labels sampled from
// the model's own predictions on one microbatch, the gradient of the
// cross-entropy against them, and h ← β2·h + (1−β2)·ĝ².
//
// It is a compiled function of its own, (params, optimizer state, key, x)
// → optimizer state: it computes other gradients than the step, on other
// labels, only every k updates, so folding it into the step would either
// run it every update or need a second trace. The random key is an input,
// made on the host from the run's seed and the update number, because
// MLX's implicit key is per-thread state that a trace would bake in as a
// constant; so estimates differ from one refresh to the next, the function
// traces once, and a resumed run draws the same labels.
type SophiaEstimator struct {
	opt      *optim.Sophia
	vag      *mlx.ValueAndGradFunc
	compiled *mlx.Closure
	m        *model.Transformer
	seed     uint64
	n, ns    int
	traces   int
}

// NewSophiaEstimator returns the estimator for opt over m, or nil when opt
// is not Sophia.
func NewSophiaEstimator(opt optim.Optimizer, m *model.Transformer, seed uint64, compile bool) (*SophiaEstimator, error) {
	so, ok := opt.(*optim.Sophia)
	if !ok {
		return nil, nil
	}
	e := &SophiaEstimator{opt: so, m: m, seed: seed, n: len(m.Specs), ns: len(so.StateNames())}
	argnums := make([]int, e.n)
	for i := range argnums {
		argnums[i] = i
	}
	err := mlx.Do(func() error {
		vag, err := mlx.ValueAndGrad(func(in []*mlx.Array) ([]*mlx.Array, error) {
			return []*mlx.Array{mlx.Mean(m.TokenLosses(in[:e.n], in[e.n], in[e.n+1]))}, nil
		}, argnums...)
		if err != nil {
			return fmt.Errorf("sophia estimate: %w", err)
		}
		e.vag = vag
		if compile {
			if e.compiled, err = mlx.Compile(e.body); err != nil {
				vag.Free()
				return fmt.Errorf("sophia estimate: compiling: %w", err)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return e, nil
}

// body is the estimate: in is params, optimizer state, key, x.
func (e *SophiaEstimator) body(in []*mlx.Array) ([]*mlx.Array, error) {
	e.traces++
	params, state := in[:e.n], in[e.n:e.n+e.ns]
	key, x := in[e.n+e.ns], in[e.n+e.ns+1]
	logits := mlx.AsType(e.m.Logits(params, x), mlx.Float32)
	y := mlx.AsType(mlx.StopGradient(mlx.RandomCategorical(logits, -1, key)), mlx.Int32)
	_, grads, err := e.vag.Call(append(append([]*mlx.Array(nil), params...), x, y)...)
	if err != nil {
		return nil, err
	}
	return e.opt.UpdateHessian(grads, state)
}

// Traces counts how often the estimate's Go body ran (once when compiled).
func (e *SophiaEstimator) Traces() int { return e.traces }

// Due reports whether the update after step completed updates starts with
// an estimate: the first one, and every HessianEvery-th after it.
func (e *SophiaEstimator) Due(step int) bool {
	return e != nil && step%e.opt.Config().HessianEvery == 0
}

// Estimate replaces the Hessian estimate in s using the first microbatch
// of b, with the sampling key of update update.
func (e *SophiaEstimator) Estimate(s *step.State, b step.Batch, update int) error {
	err := s.RefreshOptState(func(params, opt []*mlx.Array) ([]*mlx.Array, error) {
		bt := b.B * b.T
		x := mlx.FromSlice(b.X[:bt], b.B, b.T)
		key := mlx.RandomKey(e.seed ^ (uint64(update)+1)*sophiaKeySalt)
		defer mlx.Free(x, key)
		in := append(append(append([]*mlx.Array(nil), params...), opt...), key, x)
		var out []*mlx.Array
		var err error
		if e.compiled != nil {
			out, err = e.compiled.Call(in...)
		} else {
			out, err = e.body(in)
		}
		if err != nil {
			return nil, err
		}
		mlx.Free(opt...)
		return out, nil
	})
	if err != nil {
		return fmt.Errorf("sophia estimate: %w", err)
	}
	return nil
}

// Free releases the estimate's functions.
func (e *SophiaEstimator) Free() {
	if e == nil {
		return
	}
	e.vag.Free()
	if e.compiled != nil {
		e.compiled.Free()
	}
}
