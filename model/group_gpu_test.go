//go:build gpu

package model

import (
	"testing"

	"github.com/posttrainllm/posttrainllm/internal/mlxtest"
	"github.com/posttrainllm/posttrainllm/mlx"
)

// TestGPUGroupedLinears runs grouped Linears (q/k/v and SwiGLU's w1/w3,
// as adapters use them) in the GPU's formulation, whose stacked q/k/v
// rows go through the heads kernel: every family's float32 loss and
// gradients equal the model's without Linears.
func TestGPUGroupedLinears(t *testing.T) {
	mlxtest.Run(t, func(t testing.TB) {
		mlxtest.RequireGPU(t)
		if err := mlx.SetDefaultDevice(mlx.GPU); err != nil {
			t.Fatal(err)
		}
		for name, c := range familyConfigs() {
			f := formulationFor(mlx.GPU, c)
			if !f.stackedProjections || !f.cudaKernels {
				t.Fatalf("%s: the GPU formulation has stacked q/k/v %v, CUDA kernels %v; want both", name, f.stackedProjections, f.cudaKernels)
			}
			checkGroupedLinears(t, name+", GPU", c, f)
		}
	})
}
