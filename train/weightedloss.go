package train

import (
	"github.com/posttrainllm/posttrainllm/mlx"
	"github.com/posttrainllm/posttrainllm/model"
	"github.com/posttrainllm/posttrainllm/optim"
	"github.com/posttrainllm/posttrainllm/peft"
)

// FullLoss is the weighted loss of a full fine-tune: every parameter of m
// is trainable and nothing is frozen. Per target it is the cross-entropy
// plus ZLoss·logsumexp², weighted by w and summed (see WeightedLossFunc).
func FullLoss(m *model.TinyGPT) WeightedLossFunc {
	return func(params, _ []*mlx.Array, x, y, w *mlx.Array) *mlx.Array {
		return weightedTokenLoss(m, params, x, y, w)
	}
}

// AdapterLoss is the weighted loss of fine-tuning m through adapter a:
// the trainable arrays are a's parameters, the frozen ones m's base
// parameters (a.Quant's layout for a quantized base), and the model
// applies the adapters unmerged (peft.Adapter.Linears): no merged weight
// is formed per microbatch.
func AdapterLoss(m *model.TinyGPT, a *peft.Adapter) WeightedLossFunc {
	return func(adapter, base []*mlx.Array, x, y, w *mlx.Array) *mlx.Array {
		ce, lse := AdapterTerms(m, a, adapter, base, x, y)
		return weightedTerms(m, ce, lse, w)
	}
}

// AdapterTerms is m.LossTerms of the model with adapter a's arrays
// adapter applied unmerged to the frozen base.
func AdapterTerms(m *model.TinyGPT, a *peft.Adapter, adapter, base []*mlx.Array, x, y *mlx.Array) (ce, lse *mlx.Array) {
	lin, params, err := a.Linears(base, adapter)
	if err != nil {
		return mlx.ErrorArray(err), mlx.ErrorArray(err)
	}
	return m.LossTermsWith(params, lin, x, y)
}

// weightedTokenLoss is Σ w·(CE + ZLoss·lse²) over one microbatch. A zero
// weight removes its position whatever its loss, and weights that are all
// zero give 0, never 0/0: the division by the token count happened on the
// host (Batch.NormalizedWeights).
func weightedTokenLoss(m *model.TinyGPT, params []*mlx.Array, x, y, w *mlx.Array) *mlx.Array {
	ce, lse := m.LossTerms(params, x, y)
	return weightedTerms(m, ce, lse, w)
}

// weightedTerms is Σ w·(CE + ZLoss·lse²) of LossTerms' outputs.
func weightedTerms(m *model.TinyGPT, ce, lse, w *mlx.Array) *mlx.Array {
	per := ce
	if z := m.Config.ZLoss; z > 0 {
		per = mlx.Add(ce, mlx.MulScalar(mlx.Square(lse), z))
	}
	return mlx.Sum(mlx.Multiply(per, w))
}

// AdapterOptimizerParams describes adapter a's parameters to an
// optimizer: no weight decay (the adapters are a small update of weights
// that decay already shaped, and decaying B·A towards zero pulls the model
// back to its base, as PEFT's and mlx-lm's defaults assume) and nothing
// for Muon to orthogonalise.
func AdapterOptimizerParams(a *peft.Adapter) []optim.Param {
	out := make([]optim.Param, len(a.Specs))
	for i, s := range a.Specs {
		out[i] = optim.Param{Name: s.Name, Shape: s.Shape}
	}
	return out
}
