package optim

import (
	"fmt"
	"math"

	"github.com/posttrainllm/posttrainllm/mlx"
)

// The quintic Newton–Schulz coefficients of Keller Jordan's Muon, chosen to
// push every singular value of the normalised update towards 1 in few steps.
const (
	nsA = 3.4445
	nsB = -4.7750
	nsC = 2.0315
)

// MuonConfig configures Muon (Keller Jordan 2024, "MomentUm Orthogonalized by
// Newton–Schulz") for the parameters marked Param.Matrix, and the AdamW that
// updates every other parameter.
//
// The lr input is Muon's learning rate (typically around 0.02); the AdamW
// parameters use lr·AdamWLRScale.
type MuonConfig struct {
	Momentum float64 // momentum decay; default 0.95
	Nesterov bool    // use the Nesterov look-ahead (1−μ)·g + μ·m; default true
	NSSteps  int     // Newton–Schulz iterations; default 5
	Eps      float64 // added to the Frobenius norm before normalising; default 1e-7
	// WeightDecay is decoupled and scaled by lr, only where Param.Decay;
	// default 0.01 (MLX's Muon default: at lr 0.02 it shrinks weights by
	// 2e-4 per step, as AdamW's defaults do at lr·AdamWLRScale = 0.002).
	WeightDecay float64
	// AdamW configures the optimizer of the parameters not marked Matrix
	// (embeddings, output head, norms, biases); default DefaultAdamWConfig.
	AdamW AdamWConfig
	// AdamWLRScale multiplies the lr input for the AdamW parameters; default
	// 0.1, so Muon's usual 0.02 gives AdamW 0.002.
	AdamWLRScale float64
}

// DefaultMuonConfig returns Momentum 0.95, Nesterov true, NSSteps 5, Eps
// 1e-7, WeightDecay 0.01, AdamW DefaultAdamWConfig(), AdamWLRScale 0.1.
func DefaultMuonConfig() MuonConfig {
	return MuonConfig{
		Momentum: 0.95, Nesterov: true, NSSteps: 5, Eps: 1e-7, WeightDecay: 0.01,
		AdamW: DefaultAdamWConfig(), AdamWLRScale: 0.1,
	}
}

func (c MuonConfig) validate() error {
	var stepsErr error
	if c.NSSteps < 1 {
		stepsErr = fmt.Errorf("optim: muon: NSSteps = %d, want >= 1", c.NSSteps)
	}
	return firstError(
		checkUnit("muon", "Momentum", c.Momentum),
		stepsErr,
		checkPositive("muon", "Eps", c.Eps),
		checkNonNegative("muon", "WeightDecay", c.WeightDecay),
		c.AdamW.validate("muon: AdamW"),
		checkPositive("muon", "AdamWLRScale", c.AdamWLRScale),
	)
}

// Muon is the Muon optimizer with an AdamW fallback. Its state is, after the
// step counter, "<param>.muon_m" for each Matrix parameter and
// "<param>.adam_m", "<param>.adam_v" for each other parameter.
//
// Newton–Schulz runs in float32 whatever the parameter dtype: the CPU
// backend has no fast bfloat16 matmul, and for the small matrices of the
// models trained here the float32 cost is minor next to the forward and
// backward passes, while it keeps the orthogonalisation exact to ~1e-6.
type Muon struct {
	cfg MuonConfig
	lay *layout
}

// NewMuon returns Muon over params; every Param.Matrix parameter must be 2-D.
func NewMuon(params []Param, cfg MuonConfig) (*Muon, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	for _, p := range params {
		if p.Matrix && len(p.Shape) != 2 {
			return nil, fmt.Errorf("optim: muon: param %q is marked Matrix but has shape %v, want 2-D", p.Name, p.Shape)
		}
	}
	lay, err := newLayout("muon", params, func(p Param) []slot {
		if p.Matrix {
			return []slot{{"muon_m", p.Shape}}
		}
		return adamSlots(p)
	})
	if err != nil {
		return nil, err
	}
	return &Muon{cfg: cfg, lay: lay}, nil
}

// Name returns "muon".
func (o *Muon) Name() string { return "muon" }

// Init returns the zero state.
func (o *Muon) Init() ([]*mlx.Array, error) { return o.lay.init() }

// StateNames returns "step", then "<param>.muon_m" for Matrix params and
// "<param>.adam_m", "<param>.adam_v" for the others.
func (o *Muon) StateNames() []string { return o.lay.stateNames() }

// Update applies one step. For a Matrix parameter of shape [r, c]:
//
//	m ← μ·m + (1−μ)·g;  u = (1−μ)·g + μ·m with Nesterov, else u = m
//	O = NewtonSchulz(u)
//	p ← p·(1 − lr·wd) − lr·√max(1, r/c)·O
//
// Every other parameter takes an AdamW step (MuonConfig.AdamW) with
// lr·AdamWLRScale.
func (o *Muon) Update(params, grads, state []*mlx.Array, lr *mlx.Array) ([]*mlx.Array, []*mlx.Array, error) {
	c := o.cfg
	return runUpdate(o.lay, params, grads, state, lr, func(s step, newParams, newState []*mlx.Array) {
		adam := newAdamCoefs(c.AdamW, mlx.MulScalar(s.lr, c.AdamWLRScale), s.t)
		decay := decayFactor(s.lr, c.WeightDecay)
		for i, prm := range o.lay.params {
			j := o.lay.first[i]
			if !prm.Matrix {
				newParams[i], newState[j], newState[j+1] = adam.apply(params[i], grads[i], state[j], state[j+1], prm.Decay)
				continue
			}
			g := f32(grads[i])
			p := f32(params[i])
			m := ema(state[j], g, c.Momentum)
			newState[j] = m
			u := m
			if c.Nesterov {
				u = ema(m, g, c.Momentum)
			}
			rows, cols := prm.Shape[0], prm.Shape[1]
			scale := math.Sqrt(max(1, float64(rows)/float64(cols)))
			orth := mlx.MulScalar(newtonSchulz(u, c.NSSteps, c.Eps), scale)
			if prm.Decay && c.WeightDecay != 0 {
				p = mlx.Multiply(p, decay)
			}
			newParams[i] = castTo(mlx.Subtract(p, mlx.Multiply(s.lr, orth)), params[i].Dtype())
		}
	})
}

// newtonSchulz approximately orthogonalises the float32 matrix g (maps it to
// U·Vᵀ of its SVD, with singular values pushed near 1) by steps quintic
// Newton–Schulz iterations on g/(‖g‖_F + eps), transposed to be wide.
func newtonSchulz(g *mlx.Array, steps int, eps float64) *mlx.Array {
	x := g
	tall := g.Dim(0) > g.Dim(1)
	if tall {
		x = mlx.Transpose(x, 1, 0)
	}
	norm := mlx.AddScalar(mlx.Sqrt(mlx.Sum(mlx.Square(x))), eps)
	x = mlx.Divide(x, norm)
	for range steps {
		a := mlx.Matmul(x, mlx.Transpose(x, 1, 0))
		b := mlx.Add(mlx.MulScalar(a, nsB), mlx.MulScalar(mlx.Matmul(a, a), nsC))
		x = mlx.Add(mlx.MulScalar(x, nsA), mlx.Matmul(b, x))
	}
	if tall {
		x = mlx.Transpose(x, 1, 0)
	}
	return x
}
