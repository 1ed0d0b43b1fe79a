package optim

import (
	"fmt"
	"math"
	"slices"

	"github.com/posttrainllm/posttrainllm/mlx"
)

// AdafactorConfig configures Adafactor (Shazeer & Stern 2018) with the
// semantics of MLX's Python mlx.optimizers.Adafactor, relative step off:
// the learning rate is the lr input (times the parameter scale below).
type AdafactorConfig struct {
	Eps1          float64 // added to g² before averaging; default 1e-30
	Eps2          float64 // floor of the parameter RMS in the lr scale; default 1e-3
	ClipThreshold float64 // the update is divided by max(1, RMS(update)/ClipThreshold); default 1.0
	DecayRate     float64 // β2 at update t is 1 − t^DecayRate; default −0.8
	// Beta1 is the momentum applied to the scaled update; 0 (the default)
	// keeps no first moment, as in the paper.
	Beta1 float64
	// WeightDecay is decoupled and scaled by the effective lr, only where
	// Param.Decay; default 0.
	WeightDecay float64
	// ScaleParameter multiplies lr by max(Eps2, RMS(param)) per parameter,
	// the paper's relative scaling; default true.
	ScaleParameter bool
}

// DefaultAdafactorConfig returns Eps1 1e-30, Eps2 1e-3, ClipThreshold 1.0,
// DecayRate −0.8, Beta1 0 (no momentum), WeightDecay 0, ScaleParameter true.
func DefaultAdafactorConfig() AdafactorConfig {
	return AdafactorConfig{Eps1: 1e-30, Eps2: 1e-3, ClipThreshold: 1.0, DecayRate: -0.8, ScaleParameter: true}
}

func (c AdafactorConfig) validate() error {
	const opt = "adafactor"
	var rateErr error
	if !(c.DecayRate < 0) || math.IsInf(c.DecayRate, 0) {
		rateErr = fmt.Errorf("optim: %s: DecayRate = %v, want a finite value < 0 (β2 = 1 − t^DecayRate must grow towards 1)", opt, c.DecayRate)
	}
	return firstError(
		checkPositive(opt, "Eps1", c.Eps1),
		checkNonNegative(opt, "Eps2", c.Eps2),
		checkPositive(opt, "ClipThreshold", c.ClipThreshold),
		rateErr,
		checkUnit(opt, "Beta1", c.Beta1),
		checkNonNegative(opt, "WeightDecay", c.WeightDecay),
	)
}

// Adafactor is the Adafactor optimizer. Its state is, after the step
// counter, per parameter of rank ≥ 2 the factored second moments
// "<param>.adafactor_row" (shape without the last axis) and
// "<param>.adafactor_col" (shape without the second-to-last axis); per other
// parameter the full "<param>.adafactor_v"; and with Beta1 > 0 also
// "<param>.adafactor_m".
type Adafactor struct {
	cfg AdafactorConfig
	lay *layout
}

// NewAdafactor returns Adafactor over params.
func NewAdafactor(params []Param, cfg AdafactorConfig) (*Adafactor, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	lay, err := newLayout("adafactor", params, func(p Param) []slot {
		var s []slot
		if n := len(p.Shape); n >= 2 {
			row := slices.Clone(p.Shape[:n-1])
			col := append(slices.Clone(p.Shape[:n-2]), p.Shape[n-1])
			s = []slot{{"adafactor_row", row}, {"adafactor_col", col}}
		} else {
			s = []slot{{"adafactor_v", p.Shape}}
		}
		if cfg.Beta1 > 0 {
			s = append(s, slot{"adafactor_m", p.Shape})
		}
		return s
	})
	if err != nil {
		return nil, err
	}
	return &Adafactor{cfg: cfg, lay: lay}, nil
}

// Name returns "adafactor".
func (o *Adafactor) Name() string { return "adafactor" }

// Init returns the zero state.
func (o *Adafactor) Init() ([]*mlx.Array, error) { return o.lay.init() }

// StateNames returns "step", then each parameter's Adafactor slots.
func (o *Adafactor) StateNames() []string { return o.lay.stateNames() }

// Update applies one Adafactor step. With t the new update count,
// β2 = 1 − t^DecayRate and u = g² + Eps1:
//
//	factored (rank ≥ 2): R ← β2·R + (1−β2)·mean(u, last axis)
//	                     C ← β2·C + (1−β2)·mean(u, second-to-last axis)
//	                     V̂ = (R / mean(R)) ⊗ C
//	otherwise:           V̂ = V ← β2·V + (1−β2)·u
//	U = g / √V̂,  U ← U / max(1, RMS(U)/ClipThreshold)
//	α = lr · max(Eps2, RMS(p))   (α = lr without ScaleParameter)
//	U ← α·U;  with Beta1 > 0: M ← β1·M + (1−β1)·U, U = M
//	p ← p·(1 − wd·α) − U         (wd zero where Param.Decay is false)
func (o *Adafactor) Update(params, grads, state []*mlx.Array, lr *mlx.Array) ([]*mlx.Array, []*mlx.Array, error) {
	c := o.cfg
	return runUpdate(o.lay, params, grads, state, lr, func(s step, newParams, newState []*mlx.Array) {
		beta2 := mlx.Subtract(scalar(1), mlx.Power(s.t, scalar(c.DecayRate)))
		for i, prm := range o.lay.params {
			j := o.lay.first[i]
			g := f32(grads[i])
			p := f32(params[i])
			alpha := s.lr
			if c.ScaleParameter {
				alpha = mlx.Multiply(s.lr, mlx.Maximum(scalar(c.Eps2), rms(p)))
			}
			u := mlx.AddScalar(mlx.Square(g), c.Eps1)
			var upd *mlx.Array
			if len(prm.Shape) >= 2 {
				row := emaArr(state[j], mlx.Mean(u, -1), beta2)
				col := emaArr(state[j+1], mlx.Mean(u, -2), beta2)
				newState[j], newState[j+1] = row, col
				j += 2
				rFactor := mlx.Rsqrt(mlx.Divide(row, mlx.MeanKeep(row, -1)))
				cFactor := mlx.Rsqrt(col)
				upd = mlx.Multiply(mlx.Multiply(mlx.ExpandDims(rFactor, -1), mlx.ExpandDims(cFactor, -2)), g)
			} else {
				v := emaArr(state[j], u, beta2)
				newState[j] = v
				j++
				upd = mlx.Multiply(mlx.Rsqrt(v), g)
			}
			clip := mlx.Maximum(scalar(1), mlx.MulScalar(rms(upd), 1/c.ClipThreshold))
			upd = mlx.Multiply(alpha, mlx.Divide(upd, clip))
			if c.Beta1 > 0 {
				m := ema(state[j], upd, c.Beta1)
				newState[j] = m
				upd = m
			}
			if prm.Decay && c.WeightDecay != 0 {
				p = mlx.Multiply(p, mlx.Subtract(scalar(1), mlx.MulScalar(alpha, c.WeightDecay)))
			}
			newParams[i] = castTo(mlx.Subtract(p, upd), params[i].Dtype())
		}
	})
}
