package train

import (
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
