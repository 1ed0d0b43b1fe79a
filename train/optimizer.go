package train

import (
	"fmt"

	"github.com/posttrainllm/posttrainllm/model"
	"github.com/posttrainllm/posttrainllm/optim"
)

// OptimizerParams describes the model's parameters to an optimizer: weight
// decay on 2-D weights (embeddings, matrices, head) but not on norms, as in
// nanoGPT; Muon orthogonalises the hidden matrices only.
func OptimizerParams(specs []model.ParamSpec) []optim.Param {
	out := make([]optim.Param, len(specs))
	for i, s := range specs {
		out[i] = optim.Param{Name: s.Name, Shape: s.Shape, Decay: len(s.Shape) >= 2, Matrix: s.Kind == model.Matrix}
	}
	return out
}

// NewOptimizer builds the run's optimizer with its defaults, overriding the
// weight decay when the config sets one.
func NewOptimizer(cfg Config, specs []model.ParamSpec) (optim.Optimizer, error) {
	return NewOptimizerFor(cfg, OptimizerParams(specs))
}

// NewOptimizerFor is NewOptimizer for any list of trainable parameters,
// such as a fine-tune's adapters (AdapterOptimizerParams).
func NewOptimizerFor(cfg Config, params []optim.Param) (optim.Optimizer, error) {
	oc := optim.DefaultConfig()
	if wd := cfg.WeightDecay; wd != nil {
		oc.AdamW.WeightDecay = *wd
		oc.Lion.WeightDecay = *wd
		oc.Adafactor.WeightDecay = *wd
		oc.Muon.WeightDecay = *wd
		oc.Muon.AdamW.WeightDecay = *wd
		oc.SGD.WeightDecay = *wd
		oc.GaLore.AdamW.WeightDecay = *wd
		oc.Sophia.WeightDecay = *wd
	}
	setGaLoreConfig(&oc.GaLore, cfg)
	setSophiaConfig(&oc.Sophia, cfg)
	return optim.New(cfg.Optimizer, params, oc)
}

// setGaLoreConfig applies the config's GaLore settings where they are set.
func setGaLoreConfig(gc *optim.GaLoreConfig, cfg Config) {
	if cfg.GaLoreRank != 0 {
		gc.Rank = cfg.GaLoreRank
	}
	if cfg.GaLoreGap != 0 {
		gc.UpdateGap = cfg.GaLoreGap
	}
	if cfg.GaLoreScale != 0 {
		gc.Scale = cfg.GaLoreScale
	}
}

// validateGaLore checks the GaLore settings, building the optimizer when
// it is galore so that a rank no matrix can take fails before the run.
func (c Config) validateGaLore() error {
	if c.SophiaEvery < 0 || !(c.SophiaRho >= 0) {
		return fmt.Errorf("sophia_every = %d, sophia_rho = %g; want values >= 0 (0 for the default)", c.SophiaEvery, c.SophiaRho)
	}
	if c.GaLoreRank < 0 || c.GaLoreGap < 0 || !(c.GaLoreScale >= 0) {
		return fmt.Errorf("galore_rank = %d, galore_gap = %d, galore_scale = %g; want values >= 0 (0 for the default)",
			c.GaLoreRank, c.GaLoreGap, c.GaLoreScale)
	}
	if c.Optimizer != "galore" {
		return nil
	}
	m, err := model.New(c.Model)
	if err != nil {
		return err
	}
	opt, err := NewOptimizer(c, m.Specs)
	if err != nil {
		return err
	}
	if g := opt.(*optim.GaLore); len(g.Projected()) == 0 {
		largest := 0
		for _, s := range m.Specs {
			if s.Kind == model.Matrix && len(s.Shape) == 2 {
				largest = max(largest, min(s.Shape[0], s.Shape[1]))
			}
		}
		return fmt.Errorf("galore_rank = %d is above the smaller side of every hidden matrix (at most %d), so GaLore would be plain AdamW; want a rank <= %d",
			g.Config().Rank, largest, largest)
	}
	return nil
}

// setSophiaConfig applies the config's Sophia settings: the estimate is
// taken over the tokens of one update, and the interval and ρ where set.
func setSophiaConfig(sc *optim.SophiaConfig, cfg Config) {
	sc.Tokens = max(1, cfg.TokensPerStep())
	if cfg.SophiaEvery != 0 {
		sc.HessianEvery = cfg.SophiaEvery
	}
	if cfg.SophiaRho != 0 {
		sc.Rho = cfg.SophiaRho
	}
}
