package peft

import (
	"fmt"
	"slices"

	"github.com/posttrainllm/posttrainllm/mlx"
	"github.com/posttrainllm/posttrainllm/model"
)

// BaseLinears returns the model.Linears of the base model alone: what
// Linears computes with the adapters' contribution switched off, from
// the same frozen list base. Each adapted projection (or group of them,
// as Linears lays them out) is the base product that Linears adds the
// adapter term to, the same operations on the same arrays, so the forward
// pass is the adapted one minus that term, and a fresh adapter (B = 0)
// gives the reference's values to the bit: preference fine-tuning takes
// its frozen reference from it without a second copy of the weights. It
// also returns the parameter list the model takes with the Linears, as
// Linears does.
func (a *Adapter) BaseLinears(base []*mlx.Array) (model.Linears, []*mlx.Array, error) {
	if a.Quant != nil {
		if err := a.Quant.check(base); err != nil {
			return nil, nil, err
		}
	} else if len(base) != len(a.Base) {
		return nil, nil, fmt.Errorf("peft: got %d base arrays, the model has %d parameters", len(base), len(a.Base))
	}
	lin := model.Linears{}
	if a.Quant != nil {
		var err error
		if lin, err = a.Quant.linears(base, a.DequantizedProducts, a.DequantizedHead); err != nil {
			return nil, nil, err
		}
	}
	for _, i := range a.Targets {
		if _, quantized := lin[i]; !quantized {
			lin[i] = model.Linear{Arrays: []*mlx.Array{base[i]}, Apply: plainMatmul}
		}
	}
	if !a.PerProjection {
		a.regroup(lin, func(g group) model.Linear {
			gb := a.groupBase(g, base)
			return model.Linear{Arrays: gb.arrays, Group: slices.Clone(g.members), Apply: gb.apply}
		})
	}
	return lin, base[:len(a.Base)], nil
}
