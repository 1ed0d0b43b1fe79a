package train

import (
	"fmt"
	"path/filepath"

	"github.com/posttrainllm/posttrainllm/checkpoint"
	"github.com/posttrainllm/posttrainllm/mlx"
	"github.com/posttrainllm/posttrainllm/model"
	"github.com/posttrainllm/posttrainllm/peft"
)

// A checkpoint may hold a quantized model: one imported from an
// MLX-quantized Hugging Face folder (mlx_lm.convert -q) or fused with
// --quantize. Its model.safetensors stores each quantized projection as
// the packed uint32 "<stem>.weight" with "<stem>.scales" and
// "<stem>.biases" (peft.QuantizedFromNamed reads it back); the bits and
// group size follow from the shapes. Adapters train over it as over a
// base quantized with --quantize; sample and eval dequantize it; a full
// fine-tune or a resumed pretraining run refuses it.

// errQuantizedBase is the refusal of a quantized checkpoint by a path
// that trains or needs every weight in float.
func errQuantizedBase(file string, q *peft.Quantized, what string) error {
	return fmt.Errorf("%s holds a quantized model (%s; imported from an MLX-quantized folder or fused with --quantize): %s trains every weight and cannot train quantized ones; fine-tune adapters over it (--method lora or dora), or fuse / import float weights",
		file, q, what)
}

// CheckpointQuantization returns the quantization of the model a
// checkpoint directory holds (say "4-bit, groups of 64"), or "" for a
// float model, so that commands refuse what cannot use a quantized base
// before they write anything.
func CheckpointQuantization(dir string) (string, error) {
	var out string
	err := mlx.Do(func() error {
		st, err := ReadRunState(filepath.Join(dir, checkpoint.StateFile))
		if err != nil {
			return fmt.Errorf("checkpoint %s: %w", dir, err)
		}
		m, err := model.New(st.Config.Model)
		if err != nil {
			return err
		}
		file := filepath.Join(dir, checkpoint.ModelFile)
		arrays, _, err := mlx.LoadSafetensors(file)
		if err != nil {
			return fmt.Errorf("checkpoint %s: %w", dir, err)
		}
		defer freeNamed(arrays)
		q, _, err := peft.QuantizedFromNamed(file, m.Specs, arrays)
		if err != nil || q == nil {
			return err
		}
		out = q.String()
		return nil
	})
	return out, err
}

// orderBase picks a fine-tune's base out of a checkpoint's arrays: the
// float parameters in m's order (orderParams) and nil, or for a quantized
// model its layout and frozen list (peft.QuantizedFromNamed), which
// adapters train over. A full fine-tune, or --quantize, over a quantized
// base is refused by name. The arrays are named's own.
func orderBase(file string, named map[string]*mlx.Array, m *model.TinyGPT, ft FineTuneConfig) ([]*mlx.Array, *peft.Quantized, error) {
	q, frozen, err := peft.QuantizedFromNamed(file, m.Specs, named)
	if err != nil {
		return nil, nil, err
	}
	if q == nil {
		base, err := orderParams(file, named, m)
		return base, nil, err
	}
	if !ft.UsesAdapter() {
		return nil, nil, errQuantizedBase(file, q, "a full fine-tune")
	}
	if ft.Quantize != 0 {
		return nil, nil, fmt.Errorf("quantize %d: the base %s is quantized already (%s); leave --quantize out to train the adapters over it as it is",
			ft.Quantize, file, q)
	}
	return frozen, q, nil
}

// loadModelQuant is loadModel for a checkpoint that may hold a quantized
// model: params is the frozen list of q's layout where q is not nil (the
// float parameters otherwise); free releases them.
func loadModelQuant(dir string) (st RunState, m *model.TinyGPT, params []*mlx.Array, q *peft.Quantized, free func(), err error) {
	st, err = ReadRunState(filepath.Join(dir, checkpoint.StateFile))
	if err != nil {
		return st, nil, nil, nil, nil, fmt.Errorf("checkpoint %s: %w", dir, err)
	}
	if err := checkModelMemory(st.Config.Model); err != nil {
		return st, nil, nil, nil, nil, fmt.Errorf("checkpoint %s: %w", dir, err)
	}
	if m, err = model.New(st.Config.Model); err != nil {
		return st, nil, nil, nil, nil, err
	}
	file := filepath.Join(dir, checkpoint.ModelFile)
	arrays, _, err := mlx.LoadSafetensors(file)
	if err != nil {
		return st, nil, nil, nil, nil, fmt.Errorf("checkpoint %s: %w", dir, err)
	}
	free = func() { freeNamed(arrays) }
	q, params, err = peft.QuantizedFromNamed(file, m.Specs, arrays)
	if err == nil && q == nil {
		names := make([]string, len(m.Specs))
		shapes := make([][]int, len(m.Specs))
		for i, s := range m.Specs {
			names[i], shapes[i] = s.Name, s.Shape
		}
		params, err = checkpoint.Ordered(file, arrays, names, shapes)
	}
	if err != nil {
		free()
		return st, nil, nil, nil, nil, err
	}
	return st, m, params, q, free, nil
}

// dequantizedParams returns a quantized model's float parameters,
// evaluated, and a free that releases them and the frozen list (free).
func dequantizedParams(q *peft.Quantized, frozen []*mlx.Array, free func()) ([]*mlx.Array, func(), error) {
	deq := q.Dequantize(frozen)
	var made []*mlx.Array
	for _, i := range q.Indices {
		made = append(made, deq[i])
	}
	if err := mlx.Eval(made...); err != nil {
		mlx.Free(made...)
		return nil, nil, fmt.Errorf("dequantizing the base: %w", err)
	}
	return deq, func() { mlx.Free(made...); free() }, nil
}

// freeNamed frees the arrays of a loaded file.
func freeNamed(arrays map[string]*mlx.Array) {
	for _, a := range arrays {
		a.Free()
	}
}
