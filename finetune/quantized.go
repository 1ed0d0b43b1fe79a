package finetune

import (
	"fmt"

	"github.com/posttrainllm/posttrainllm/mlx"
	"github.com/posttrainllm/posttrainllm/model"
	"github.com/posttrainllm/posttrainllm/peft"
)

// QuantizeBase quantizes the block projections, token embedding and
// untied head of base as ft says
// (peft.QuantizeBase), sets a's Quant, frees the float weights the
// quantized ones replace and returns the frozen list, which the caller
// owns in base's place.
func QuantizeBase(a *peft.Adapter, m *model.Transformer, base []*mlx.Array, ft Config) ([]*mlx.Array, error) {
	q, frozen, err := peft.QuantizeBase(m.Specs, base, ft.QuantGroupSize(), ft.Quantize)
	if err != nil {
		return nil, fmt.Errorf("quantizing the base: %w", err)
	}
	a.Quant = q
	for _, i := range q.Indices {
		base[i].Free()
	}
	return frozen, nil
}
