package optim

import (
	"fmt"

	"github.com/posttrainllm/posttrainllm/mlx"
)

// SophiaConfig configures SophiaG (Liu et al. 2023, "Sophia: A Scalable
// Stochastic Second-order Optimizer for Language Model Pre-training"),
// with the defaults of the authors' code.
type SophiaConfig struct {
	Beta1 float64 // gradient EMA decay; default 0.965
	Beta2 float64 // Hessian-estimate EMA decay; default 0.99
	// Rho scales the Hessian in the preconditioner; default 0.04.
	Rho float64
	// Tokens is the batch size the Gauss-Newton-Bartlett estimate is
	// taken over, in tokens (the authors' bs): it multiplies the
	// estimate, which is a squared mean gradient. Set by the trainer.
	Tokens int
	// Eps keeps the ratio finite where the estimate is zero; default 1e-15.
	Eps float64
	// WeightDecay is decoupled and scaled by lr, where Param.Decay;
	// default 0.1.
	WeightDecay float64
	// HessianEvery is k, the updates between Hessian estimates; the
	// caller runs them (EstimateHessian). Default 10.
	HessianEvery int
}

// DefaultSophiaConfig returns Beta1 0.965, Beta2 0.99, Rho 0.04, Tokens 1,
// Eps 1e-15, WeightDecay 0.1 and HessianEvery 10.
func DefaultSophiaConfig() SophiaConfig {
	return SophiaConfig{Beta1: 0.965, Beta2: 0.99, Rho: 0.04, Tokens: 1, Eps: 1e-15, WeightDecay: 0.1, HessianEvery: 10}
}

func (c SophiaConfig) validate() error {
	if c.Tokens < 1 {
		return fmt.Errorf("optim: sophia: Tokens = %d, want >= 1", c.Tokens)
	}
	if c.HessianEvery < 1 {
		return fmt.Errorf("optim: sophia: HessianEvery = %d, want >= 1", c.HessianEvery)
	}
	return firstError(
		checkUnit("sophia", "Beta1", c.Beta1),
		checkUnit("sophia", "Beta2", c.Beta2),
		checkPositive("sophia", "Rho", c.Rho),
		checkPositive("sophia", "Eps", c.Eps),
		checkNonNegative("sophia", "WeightDecay", c.WeightDecay),
	)
}

// Sophia is SophiaG. Its state is, after the step counter, two float32
// arrays per parameter: the gradient EMA "<param>.sophia_m" and the
// Hessian-diagonal EMA "<param>.sophia_h". Each update is
//
//	m ← β1·m + (1−β1)·g
//	p ← p·(1 − lr·wd) − lr · sign(m) · min(|m| / (ρ·Tokens·h + ε), 1)
//
// a clipped, Hessian-preconditioned step: where h is small or still zero
// the step is sign(m)·lr, like signSGD. h moves only in UpdateHessian,
// which the caller runs every HessianEvery updates with the gradient of
// the loss on labels sampled from the model (the Gauss-Newton-Bartlett
// estimator): h ← β2·h + (1−β2)·ĝ².
type Sophia struct {
	cfg SophiaConfig
	lay *layout
}

// NewSophia returns SophiaG over params.
func NewSophia(params []Param, cfg SophiaConfig) (*Sophia, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	lay, err := newLayout("sophia", params, func(p Param) []slot {
		return []slot{{"sophia_m", p.Shape}, {"sophia_h", p.Shape}}
	})
	if err != nil {
		return nil, err
	}
	return &Sophia{cfg: cfg, lay: lay}, nil
}

// Name returns "sophia".
func (o *Sophia) Name() string { return "sophia" }

// Config returns the configuration.
func (o *Sophia) Config() SophiaConfig { return o.cfg }

// Init returns the zero state.
func (o *Sophia) Init() ([]*mlx.Array, error) { return o.lay.init() }

// StateNames returns "step", then "<param>.sophia_m", "<param>.sophia_h"
// per param.
func (o *Sophia) StateNames() []string { return o.lay.stateNames() }

// Update applies one SophiaG update (see Sophia).
func (o *Sophia) Update(params, grads, state []*mlx.Array, lr *mlx.Array) ([]*mlx.Array, []*mlx.Array, error) {
	return runUpdate(o.lay, params, grads, state, lr, func(s step, newParams, newState []*mlx.Array) {
		decay := decayFactor(s.lr, o.cfg.WeightDecay)
		for i, p := range o.lay.params {
			sl := o.lay.slots(state, i)
			m := ema(sl[0], f32(grads[i]), o.cfg.Beta1)
			p32 := f32(params[i])
			if p.Decay && o.cfg.WeightDecay != 0 {
				p32 = mlx.Multiply(p32, decay)
			}
			denom := mlx.AddScalar(mlx.MulScalar(sl[1], o.cfg.Rho*float64(o.cfg.Tokens)), o.cfg.Eps)
			ratio := mlx.Minimum(mlx.Divide(mlx.Abs(m), denom), scalar(1))
			upd := mlx.Multiply(s.lr, mlx.Multiply(mlx.Sign(m), ratio))
			newParams[i] = castTo(mlx.Subtract(p32, upd), params[i].Dtype())
			j := o.lay.first[i]
			// h passes through unchanged, as a handle of its own.
			newState[j], newState[j+1] = m, mlx.Copy(sl[1])
		}
	})
}

// UpdateHessian returns state with every Hessian EMA moved towards the
// squares of grads, the gradients of the loss on sampled labels:
// h ← β2·h + (1−β2)·ĝ². Like Update it traces into a compiled function
// (the trainer compiles it on its own, with the sampling key as an
// input) and returns new arrays for the h slots and copies of the rest,
// without freeing its inputs.
func (o *Sophia) UpdateHessian(grads, state []*mlx.Array) ([]*mlx.Array, error) {
	if len(grads) != len(o.lay.params) || len(state) != len(o.lay.names) {
		return nil, fmt.Errorf("optim: sophia: Hessian update got %d grads and %d state arrays, want %d and %d",
			len(grads), len(state), len(o.lay.params), len(o.lay.names))
	}
	out := make([]*mlx.Array, len(state))
	err := mlx.Do(func() error {
		scope := mlx.NewScope()
		defer scope.Close()
		out[0] = mlx.Copy(state[0])
		for i := range o.lay.params {
			j := o.lay.first[i]
			g := f32(grads[i])
			out[j] = mlx.Copy(state[j])
			out[j+1] = ema(state[j+1], mlx.Square(g), o.cfg.Beta2)
		}
		for j, a := range out {
			if err := a.Err(); err != nil {
				return fmt.Errorf("optim: sophia: Hessian update of %q: %w", o.lay.names[j], err)
			}
		}
		scope.Keep(out...)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
