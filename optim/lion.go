package optim

import "github.com/posttrainllm/posttrainllm/mlx"

// LionConfig configures Lion (Chen et al. 2023, "Symbolic Discovery of
// Optimization Algorithms").
type LionConfig struct {
	Beta1 float64 // interpolation used for the update direction; default 0.9
	Beta2 float64 // momentum decay; default 0.99
	// WeightDecay is decoupled and scaled by lr (p ← p·(1 − lr·wd)), only
	// where Param.Decay. Default 1.0: the paper advises a weight decay 3–10×
	// AdamW's because Lion's lr is 3–10× smaller, keeping lr·wd comparable.
	WeightDecay float64
}

// DefaultLionConfig returns Beta1 0.9, Beta2 0.99, WeightDecay 1.0.
func DefaultLionConfig() LionConfig {
	return LionConfig{Beta1: 0.9, Beta2: 0.99, WeightDecay: 1.0}
}

func (c LionConfig) validate() error {
	return firstError(
		checkUnit("lion", "Beta1", c.Beta1),
		checkUnit("lion", "Beta2", c.Beta2),
		checkNonNegative("lion", "WeightDecay", c.WeightDecay),
	)
}

// Lion is the Lion optimizer. Its state is, after the step counter, one
// float32 momentum per parameter: "<param>.lion_m".
type Lion struct {
	cfg LionConfig
	lay *layout
}

// NewLion returns Lion over params.
func NewLion(params []Param, cfg LionConfig) (*Lion, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	lay, err := newLayout("lion", params, func(p Param) []slot { return []slot{{"lion_m", p.Shape}} })
	if err != nil {
		return nil, err
	}
	return &Lion{cfg: cfg, lay: lay}, nil
}

// Name returns "lion".
func (o *Lion) Name() string { return "lion" }

// Params returns the parameters o was built for.
func (o *Lion) Params() []Param { return o.lay.paramList() }

// Over returns Lion with o's configuration over params (Elementwise).
func (o *Lion) Over(params []Param) (Optimizer, error) { return NewLion(params, o.cfg) }

// Init returns the zero state.
func (o *Lion) Init() ([]*mlx.Array, error) { return o.lay.init() }

// StateNames returns "step", then "<param>.lion_m" per param.
func (o *Lion) StateNames() []string { return o.lay.stateNames() }

// Update applies one Lion step:
//
//	c ← β1·m + (1−β1)·g
//	p ← p·(1 − lr·wd) − lr·sign(c)
//	m ← β2·m + (1−β2)·g
//
// with wd zero where Param.Decay is false.
func (o *Lion) Update(params, grads, state []*mlx.Array, lr *mlx.Array) ([]*mlx.Array, []*mlx.Array, error) {
	return runUpdate(o.lay, params, grads, state, lr, func(s step, newParams, newState []*mlx.Array) {
		decay := decayFactor(s.lr, o.cfg.WeightDecay)
		for i, prm := range o.lay.params {
			j := o.lay.first[i]
			m := state[j]
			g := f32(grads[i])
			p := f32(params[i])
			dir := mlx.Sign(ema(m, g, o.cfg.Beta1))
			if prm.Decay && o.cfg.WeightDecay != 0 {
				p = mlx.Multiply(p, decay)
			}
			newParams[i] = castTo(mlx.Subtract(p, mlx.Multiply(s.lr, dir)), params[i].Dtype())
			newState[j] = ema(m, g, o.cfg.Beta2)
		}
	})
}
