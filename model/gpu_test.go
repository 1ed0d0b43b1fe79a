//go:build gpu

// GPU tests: built only with -tags gpu (make test-gpu-bin) and run on a
// machine with a CUDA GPU and libmlx.so from mlx-cuda-13 (scripts/gpu-bench.sh).
// They fail, never skip, when no GPU is there.

package model

import (
	"math"
	"testing"

	"github.com/posttrainllm/posttrainllm/internal/mlxtest"
	"github.com/posttrainllm/posttrainllm/mlx"
)

// TestGPULossMatchesPlainFormulationOnCPU computes the bf16 model's loss and
// gradients on the GPU, where Loss takes MLX's fused cross-entropy kernel on
// the bf16 logits, and the plain float32-cross-entropy formulation on the
// CPU, from the same float32 master weights: they must agree to bf16
// precision.
func TestGPULossMatchesPlainFormulationOnCPU(t *testing.T) {
	mlxtest.Run(t, func(t testing.TB) {
		if !mlx.GPU.Available() {
			t.Fatal("no GPU: this libmlx.so has no CUDA backend or no device is visible")
		}
		c := smallConfig()
		c.VocabSize = 257 // odd, as GPT-2's 50,257: rows of the logits are unaligned
		c.Dtype, c.MasterFP32, c.TiedEmbeddings = "bfloat16", true, true
		m, err := New(c)
		if err != nil {
			t.Fatal(err)
		}
		run := func(d mlx.Device, loss func(p []*mlx.Array, x, y *mlx.Array) *mlx.Array) (float64, [][]float64) {
			if err := mlx.SetDefaultDevice(d); err != nil {
				t.Fatal(err)
			}
			params, err := m.Init(7)
			if err != nil {
				t.Fatal(err)
			}
			x, y := tokens(t, 2, 16, c.VocabSize, 1), tokens(t, 2, 16, c.VocabSize, 4)
			return lossAndGrads(t, loss, params, x, y)
		}
		gpuLoss, gpuGrads := run(mlx.GPU, m.Loss)
		cpuLoss, cpuGrads := run(mlx.CPU, func(p []*mlx.Array, x, y *mlx.Array) *mlx.Array {
			return referenceLoss(m, p, x, y)
		})
		if math.Abs(gpuLoss-cpuLoss) > 2e-2*cpuLoss {
			t.Fatalf("GPU loss %.5f, CPU plain formulation %.5f", gpuLoss, cpuLoss)
		}
		for i := range gpuGrads {
			var dot, ng, nc float64
			for j := range gpuGrads[i] {
				dot += gpuGrads[i][j] * cpuGrads[i][j]
				ng += gpuGrads[i][j] * gpuGrads[i][j]
				nc += cpuGrads[i][j] * cpuGrads[i][j]
			}
			if cos := dot / math.Sqrt(ng*nc); !(cos > 0.99) {
				t.Fatalf("gradient of %s: cosine %.4f between GPU and CPU, want > 0.99", m.Specs[i].Name, cos)
			}
		}
		t.Logf("loss GPU %.5f, CPU %.5f", gpuLoss, cpuLoss)
	})
}
