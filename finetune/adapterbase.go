package finetune

import (
	"fmt"

	"github.com/posttrainllm/posttrainllm/mlx"
	"github.com/posttrainllm/posttrainllm/model"
	"github.com/posttrainllm/posttrainllm/peft"
	"github.com/posttrainllm/posttrainllm/step"
	"github.com/posttrainllm/posttrainllm/train"
)

// AdapterStepOptions are the step options o of an adapter fine-tune
// (LoRA, DoRA) of model m: o with compute-dtype copies of the float32
// adapters whenever m computes in a lower precision, and none otherwise. The adapter
// products x·Aᵀ and (x·Aᵀ)·Bᵀ then run in the activations' dtype, as the
// base's own products do, and the optimizer still updates float32
// masters. Without the copies every adapted projection would cast its
// input activations to float32 and multiply in float32 in each
// microbatch, forward and backward: on a GPU that made a LoRA step
// slower than a full fine-tune of the same model (docs/finetuning.md).
func AdapterStepOptions(o step.StepOptions, m model.Config) step.StepOptions {
	o.ComputeCopies, o.ComputeDtype = false, 0
	if cd := m.ComputeDtype(); cd != mlx.Float32 {
		o.ComputeCopies, o.ComputeDtype = true, cd
	}
	return o
}

// CastFrozenBase stores an adapter fine-tune's frozen base in the model's
// compute dtype, in place: a model kept with float32 masters
// (train.Config.Model.MasterFP32) would otherwise cast every frozen weight to
// the compute dtype in every microbatch, and the frozen base needs no
// master copy, since it is never updated. It halves the base's memory
// for a bfloat16 model. Arrays already in that dtype (or not floating
// point) are left alone; each replaced array is freed.
func CastFrozenBase(cfg train.Config, base []*mlx.Array) error {
	cd := cfg.Model.ComputeDtype()
	if cd == cfg.Model.ParamDtype() {
		return nil
	}
	return mlx.Do(func() error {
		for i, a := range base {
			if a.Dtype() != mlx.Float32 {
				continue
			}
			c := mlx.AsType(a, cd)
			if err := mlx.Eval(c); err != nil { // one at a time: no second copy of the whole base
				c.Free()
				return fmt.Errorf("frozen base in %s: %w", cd, err)
			}
			a.Free()
			base[i] = c
		}
		return nil
	})
}

// NewAdapter is peft.New of the fine-tune's adapter over the layout specs,
// laid out for training on cfg's device. On a GPU the adapted projections
// that share their input are grouped into one product each
// (peft.Adapter.Linears), since a GPU step is bound by its number of
// operations. On the CPU each projection keeps its own product
// (peft.Adapter.PerProjection), since grouping saved no time there and
// its stacked frozen weights raised the peak (SmolLM2-135M LoRA in
// float32: 1.463 GB grouped against 1.403 GB per projection). On the CPU
// and on a CUDA GPU the block projections of a quantized base are
// dequantized where they are used (peft.Adapter.DequantizedProducts):
// MLX's quantized matmul is many times slower than its float GEMM on the
// CPU, and on an H200 a Qwen2.5-0.5B-shaped QLoRA update took 0.091 s
// instead of 0.120 s and peaked 0.26 GiB lower (docs/finetuning.md). On
// a CUDA GPU a quantized output head is also dequantized once per pass of
// the chunked loss (peft.Adapter.DequantizedHead): the same update then
// took 0.060–0.066 s instead of 0.092–0.094 s and peaked at 10.2–10.7 GiB
// instead of 12.4. On the CPU MLX's dequantize holds temporaries several
// times its output, and the float head raised SmolLM2-135M's QLoRA peak
// from 0.85 to 1.22 GB in chunks of 128, above mlx-lm's
// (docs/performance/memory.md), so the CPU keeps the quantized matmul
// there. On Metal, where MLX's quantized kernels are its own, the
// products are left as they are.
func NewAdapter(cfg train.Config, ac peft.Config, specs []model.ParamSpec) (*peft.Adapter, error) {
	a, err := peft.New(ac, specs)
	if err != nil {
		return nil, err
	}
	cpu := cfg.Device != "gpu"
	cuda := !cpu && mlx.CUDAAvailable()
	a.PerProjection, a.DequantizedProducts, a.DequantizedHead = cpu, cpu || cuda, cuda
	return a, nil
}
