package finetune

import (
	"fmt"

	"github.com/posttrainllm/posttrainllm/mlx"
	"github.com/posttrainllm/posttrainllm/model"
	"github.com/posttrainllm/posttrainllm/peft"
	"github.com/posttrainllm/posttrainllm/train"
)

// A checkpoint may hold a quantized model: one imported from an
// MLX-quantized Hugging Face folder (mlx_lm.convert -q) or fused with
// --quantize. Its model.safetensors stores each quantized projection as
// the packed uint32 "<stem>.weight" with "<stem>.scales" and
// "<stem>.biases" (peft.QuantizedFromNamed reads it back); the bits and
// group size follow from the shapes. Adapters train over it as over a
// base quantized with --quantize; sample and eval dequantize it; a full
// fine-tune or a resumed pretraining run refuses it.

// orderBase picks a fine-tune's base out of a checkpoint's arrays: the
// float parameters in m's order (train.OrderParams) and nil, or for a quantized
// model its layout and frozen list (peft.QuantizedFromNamed), which
// adapters train over. A full fine-tune, or --quantize, over a quantized
// base is refused by name. The arrays are named's own.
func orderBase(file string, named map[string]*mlx.Array, m *model.Transformer, ft Config) ([]*mlx.Array, *peft.Quantized, error) {
	q, frozen, err := peft.QuantizedFromNamed(file, m.Specs, named)
	if err != nil {
		return nil, nil, err
	}
	if q == nil {
		base, err := train.OrderParams(file, named, m)
		return base, nil, err
	}
	if !ft.UsesAdapter() {
		return nil, nil, train.QuantizedBaseError(file, q, "a full fine-tune")
	}
	if ft.Quantize != 0 {
		return nil, nil, fmt.Errorf("quantize %d: the base %s is quantized already (%s); leave --quantize out to train the adapters over it as it is",
			ft.Quantize, file, q)
	}
	return frozen, q, nil
}
