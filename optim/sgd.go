package optim

import (
	"fmt"

	"github.com/posttrainllm/posttrainllm/mlx"
)

// SGDConfig configures stochastic gradient descent with momentum, with
// PyTorch's semantics (no dampening).
type SGDConfig struct {
	Momentum float64 // momentum coefficient; 0 keeps no buffer; default 0.9
	Nesterov bool    // Nesterov momentum (needs Momentum > 0); default false
	// WeightDecay is L2 regularisation added to the gradient (g ← g + wd·p),
	// only where Param.Decay; default 0.
	WeightDecay float64
}

// DefaultSGDConfig returns Momentum 0.9, Nesterov false, WeightDecay 0.
func DefaultSGDConfig() SGDConfig { return SGDConfig{Momentum: 0.9} }

func (c SGDConfig) validate() error {
	if err := firstError(
		checkUnit("sgd", "Momentum", c.Momentum),
		checkNonNegative("sgd", "WeightDecay", c.WeightDecay),
	); err != nil {
		return err
	}
	if c.Nesterov && c.Momentum == 0 {
		return fmt.Errorf("optim: sgd: Nesterov = true with Momentum = %v, want Momentum > 0", c.Momentum)
	}
	return nil
}

// SGD is stochastic gradient descent with momentum. Its state is, after the
// step counter, "<param>.sgd_m" per parameter when Momentum > 0.
type SGD struct {
	cfg SGDConfig
	lay *layout
}

// NewSGD returns SGD over params.
func NewSGD(params []Param, cfg SGDConfig) (*SGD, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	lay, err := newLayout("sgd", params, func(p Param) []slot {
		if cfg.Momentum == 0 {
			return nil
		}
		return []slot{{"sgd_m", p.Shape}}
	})
	if err != nil {
		return nil, err
	}
	return &SGD{cfg: cfg, lay: lay}, nil
}

// Name returns "sgd".
func (o *SGD) Name() string { return "sgd" }

// Params returns the parameters o was built for.
func (o *SGD) Params() []Param { return o.lay.paramList() }

// Over returns SGD with o's configuration over params (Elementwise).
func (o *SGD) Over(params []Param) (Optimizer, error) { return NewSGD(params, o.cfg) }

// Init returns the zero state.
func (o *SGD) Init() ([]*mlx.Array, error) { return o.lay.init() }

// StateNames returns "step", then "<param>.sgd_m" per param when Momentum > 0.
func (o *SGD) StateNames() []string { return o.lay.stateNames() }

// Update applies one SGD step:
//
//	g ← g + wd·p            (wd zero where Param.Decay is false)
//	b ← μ·b + g             (with Momentum > 0)
//	d = g + μ·b with Nesterov, else d = b (d = g without momentum)
//	p ← p − lr·d
func (o *SGD) Update(params, grads, state []*mlx.Array, lr *mlx.Array) ([]*mlx.Array, []*mlx.Array, error) {
	c := o.cfg
	return runUpdate(o.lay, params, grads, state, lr, func(s step, newParams, newState []*mlx.Array) {
		for i, prm := range o.lay.params {
			g := f32(grads[i])
			p := f32(params[i])
			if prm.Decay && c.WeightDecay != 0 {
				g = mlx.Add(g, mlx.MulScalar(p, c.WeightDecay))
			}
			d := g
			if c.Momentum > 0 {
				j := o.lay.first[i]
				b := mlx.Add(mlx.MulScalar(state[j], c.Momentum), g)
				newState[j] = b
				d = b
				if c.Nesterov {
					d = mlx.Add(g, mlx.MulScalar(b, c.Momentum))
				}
			}
			newParams[i] = castTo(mlx.Subtract(p, mlx.Multiply(s.lr, d)), params[i].Dtype())
		}
	})
}
