package runfolder

import (
	"fmt"
	"path/filepath"

	"github.com/posttrainllm/posttrainllm/checkpoint"
	"github.com/posttrainllm/posttrainllm/finetune"
	"github.com/posttrainllm/posttrainllm/mlx"
	"github.com/posttrainllm/posttrainllm/model"
	"github.com/posttrainllm/posttrainllm/peft"
	"github.com/posttrainllm/posttrainllm/train"
)

// CheckpointQuantization returns the quantization of the model a
// checkpoint directory holds (say "4-bit, groups of 64"), or "" for a
// float model, so that commands refuse what cannot use a quantized base
// before they write anything. It is finetune.CheckpointQuantization,
// which a fine-tune's plan asks.
func CheckpointQuantization(dir string) (string, error) { return finetune.CheckpointQuantization(dir) }

// loadModel reads the run state and the parameters of checkpoint directory
// dir, in the model's order; free releases the parameters. A quantized
// model (loadModelQuant) is dequantized.
func loadModel(dir string) (st train.RunState, m *model.Transformer, params []*mlx.Array, free func(), err error) {
	st, m, params, q, free, err := loadModelQuant(dir)
	if err != nil || q == nil {
		return st, m, params, free, err
	}
	params, deqFree, err := dequantizedParams(q, params, free)
	if err != nil {
		free()
		return st, nil, nil, nil, fmt.Errorf("checkpoint %s: %w", dir, err)
	}
	return st, m, params, deqFree, nil
}

// loadModelQuant is loadModel for a checkpoint that may hold a quantized
// model: params is the frozen list of q's layout where q is not nil (the
// float parameters otherwise); free releases them.
func loadModelQuant(dir string) (st train.RunState, m *model.Transformer, params []*mlx.Array, q *peft.Quantized, free func(), err error) {
	st, err = train.ReadRunState(filepath.Join(dir, checkpoint.StateFile))
	if err != nil {
		return st, nil, nil, nil, nil, fmt.Errorf("checkpoint %s: %w", dir, err)
	}
	if err := train.CheckModelMemory(st.Config.Model); err != nil {
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
