package finetune

import (
	"github.com/posttrainllm/posttrainllm/mlx"
	"github.com/posttrainllm/posttrainllm/model"
	"github.com/posttrainllm/posttrainllm/optim"
	"github.com/posttrainllm/posttrainllm/peft"
)

// AdapterTerms is m.LossTerms of the model with adapter a's arrays
// adapter applied unmerged to the frozen base.
func AdapterTerms(m *model.Transformer, a *peft.Adapter, adapter, base []*mlx.Array, x, y *mlx.Array) (ce, lse *mlx.Array) {
	lin, params, err := a.Linears(base, adapter)
	if err != nil {
		return mlx.ErrorArray(err), mlx.ErrorArray(err)
	}
	return m.LossTermsWith(params, lin, x, y)
}

// weightedTerms is Σ w·(CE + ZLoss·lse²) of LossTerms' outputs.
func weightedTerms(m *model.Transformer, ce, lse, w *mlx.Array) *mlx.Array {
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
