package optim

import "github.com/posttrainllm/posttrainllm/mlx"

// AdamWConfig configures AdamW (Loshchilov & Hutter), with PyTorch's
// semantics: decoupled weight decay multiplied by the learning rate, and
// bias correction from the in-graph update counter.
type AdamWConfig struct {
	Beta1       float64 // first-moment decay; default 0.9
	Beta2       float64 // second-moment decay; default 0.95 (the nanoGPT/GPT-3 value)
	Eps         float64 // added to the bias-corrected sqrt(v); default 1e-8
	WeightDecay float64 // decoupled, scaled by lr, only where Param.Decay; default 0.1
}

// DefaultAdamWConfig returns Beta1 0.9, Beta2 0.95, Eps 1e-8, WeightDecay 0.1.
func DefaultAdamWConfig() AdamWConfig {
	return AdamWConfig{Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.1}
}

func (c AdamWConfig) validate(opt string) error {
	return firstError(
		checkUnit(opt, "Beta1", c.Beta1),
		checkUnit(opt, "Beta2", c.Beta2),
		checkPositive(opt, "Eps", c.Eps),
		checkNonNegative(opt, "WeightDecay", c.WeightDecay),
	)
}

// AdamW is the AdamW optimizer. Its state is, after the step counter, two
// float32 moments per parameter: "<param>.adam_m" and "<param>.adam_v".
type AdamW struct {
	cfg AdamWConfig
	lay *layout
}

// NewAdamW returns AdamW over params.
func NewAdamW(params []Param, cfg AdamWConfig) (*AdamW, error) {
	if err := cfg.validate("adamw"); err != nil {
		return nil, err
	}
	lay, err := newLayout("adamw", params, adamSlots)
	if err != nil {
		return nil, err
	}
	return &AdamW{cfg: cfg, lay: lay}, nil
}

func adamSlots(p Param) []slot {
	return []slot{{"adam_m", p.Shape}, {"adam_v", p.Shape}}
}

// Name returns "adamw".
func (o *AdamW) Name() string { return "adamw" }

// Params returns the parameters o was built for.
func (o *AdamW) Params() []Param { return o.lay.paramList() }

// Over returns AdamW with o's configuration over params (Elementwise).
func (o *AdamW) Over(params []Param) (Optimizer, error) { return NewAdamW(params, o.cfg) }

// Init returns the zero state.
func (o *AdamW) Init() ([]*mlx.Array, error) { return o.lay.init() }

// StateNames returns "step", then "<param>.adam_m", "<param>.adam_v" per param.
func (o *AdamW) StateNames() []string { return o.lay.stateNames() }

// Update applies one AdamW step:
//
//	m ← β1·m + (1−β1)·g,  v ← β2·v + (1−β2)·g²
//	p ← p·(1 − lr·wd) − lr/(1−β1ᵗ) · m / (√v/√(1−β2ᵗ) + ε)
//
// with t the new update count and wd zero where Param.Decay is false.
func (o *AdamW) Update(params, grads, state []*mlx.Array, lr *mlx.Array) ([]*mlx.Array, []*mlx.Array, error) {
	return runUpdate(o.lay, params, grads, state, lr, func(s step, newParams, newState []*mlx.Array) {
		k := newAdamCoefs(o.cfg, s.lr, s.t)
		for i, p := range o.lay.params {
			sl := o.lay.slots(state, i)
			np, m, v := k.apply(params[i], grads[i], sl[0], sl[1], p.Decay)
			newParams[i] = np
			j := o.lay.first[i]
			newState[j], newState[j+1] = m, v
		}
	})
}

// adamCoefs holds the per-step scalars of AdamW, computed once per update.
type adamCoefs struct {
	cfg      AdamWConfig
	stepSize *mlx.Array // lr / (1 − β1ᵗ)
	sqrtBC2  *mlx.Array // √(1 − β2ᵗ)
	decay    *mlx.Array // 1 − lr·wd
}

func newAdamCoefs(cfg AdamWConfig, lr, t *mlx.Array) adamCoefs {
	bc1 := mlx.Subtract(scalar(1), mlx.Power(scalar(cfg.Beta1), t))
	bc2 := mlx.Subtract(scalar(1), mlx.Power(scalar(cfg.Beta2), t))
	return adamCoefs{
		cfg:      cfg,
		stepSize: mlx.Divide(lr, bc1),
		sqrtBC2:  mlx.Sqrt(bc2),
		decay:    decayFactor(lr, cfg.WeightDecay),
	}
}

// apply returns the new parameter (in p's dtype) and the new moments.
func (k adamCoefs) apply(p, g, m, v *mlx.Array, decay bool) (newP, newM, newV *mlx.Array) {
	g32 := f32(g)
	p32 := f32(p)
	newM = ema(m, g32, k.cfg.Beta1)
	newV = ema(v, mlx.Square(g32), k.cfg.Beta2)
	if decay && k.cfg.WeightDecay != 0 {
		p32 = mlx.Multiply(p32, k.decay)
	}
	denom := mlx.AddScalar(mlx.Divide(mlx.Sqrt(newV), k.sqrtBC2), k.cfg.Eps)
	upd := mlx.Multiply(k.stepSize, mlx.Divide(newM, denom))
	return castTo(mlx.Subtract(p32, upd), p.Dtype()), newM, newV
}
