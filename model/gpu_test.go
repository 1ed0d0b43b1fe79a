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
		mlxtest.RequireGPU(t)
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

// TestGPUKernelsMatchMLXOps runs each family's loss and gradients on the
// GPU with the model's CUDA kernels (attention's heads, RMSNorm's backward
// pass) and with MLX's operations in their place, from the same weights:
// in float32 they agree to float32 rounding, in bf16 to bf16's, for RoPE
// with and without scaling, grouped-query attention, learned positions
// (no rotation) and LayerNorm (no norm kernel). It also checks that the
// GPU formulation uses the kernels (formulationFor).
func TestGPUKernelsMatchMLXOps(t *testing.T) {
	mlxtest.Run(t, func(t testing.TB) {
		mlxtest.RequireGPU(t)
		if err := mlx.SetDefaultDevice(mlx.GPU); err != nil {
			t.Fatal(err)
		}
		defer mlx.SetDefaultDevice(mlx.CPU)
		for family, c := range familyConfigs() {
			for _, dtype := range []string{"float32", "bfloat16"} {
				c.Dtype = dtype
				m, params := initModel(t, c, 11)
				with := formulationFor(mlx.GPU, m.Config)
				if !with.cudaKernels {
					t.Fatalf("%s: the GPU formulation does not use the CUDA kernels", family)
				}
				without := with
				without.cudaKernels = false
				x, y := tokens(t, 3, 16, c.VocabSize, 2), tokens(t, 3, 16, c.VocabSize, 9)
				lossWith, gradsWith := lossAndGrads(t, func(p []*mlx.Array, x, y *mlx.Array) *mlx.Array { return m.loss(p, x, y, with) }, params, x, y)
				lossWithout, gradsWithout := lossAndGrads(t, func(p []*mlx.Array, x, y *mlx.Array) *mlx.Array { return m.loss(p, x, y, without) }, params, x, y)
				tol := 1e-4
				if dtype == "bfloat16" {
					tol = 3e-2
				}
				if math.Abs(lossWith-lossWithout) > tol*lossWithout {
					t.Fatalf("%s %s: loss %.6f with the kernels, %.6f without", family, dtype, lossWith, lossWithout)
				}
				// Per parameter ‖Δ‖ ≤ tol·‖g‖, plus tol·1% of the largest
				// gradient's norm: some gradients are zero but for rounding
				// (a key bias shifts every logit of a query alike).
				norms := make([]float64, len(gradsWith))
				largest := 0.0
				for i, g := range gradsWithout {
					for _, v := range g {
						norms[i] += v * v
					}
					norms[i] = math.Sqrt(norms[i])
					largest = math.Max(largest, norms[i])
				}
				for i := range gradsWith {
					var diff float64
					for j := range gradsWith[i] {
						d := gradsWith[i][j] - gradsWithout[i][j]
						diff += d * d
					}
					if diff = math.Sqrt(diff); !(diff <= tol*norms[i]+tol*0.01*largest) {
						t.Fatalf("%s %s: gradient of %s differs by %.3g with the kernels (norm %.3g, largest %.3g), want within %g of it",
							family, dtype, m.Specs[i].Name, diff, norms[i], largest, tol)
					}
				}
				t.Logf("%s %s: loss %.6f with the kernels, %.6f without", family, dtype, lossWith, lossWithout)
			}
		}
	})
}

// TestGPUFloat32GatherAddsTheEmbeddingGradientInFloat32 is
// TestFloat32GatherAddsTheEmbeddingGradientInFloat32 on the GPU, where the
// scatter-add of the gather's gradient runs as atomic additions.
func TestGPUFloat32GatherAddsTheEmbeddingGradientInFloat32(t *testing.T) {
	mlxtest.Run(t, func(t testing.TB) {
		mlxtest.RequireGPU(t)
		if err := mlx.SetDefaultDevice(mlx.GPU); err != nil {
			t.Fatal(err)
		}
		defer mlx.SetDefaultDevice(mlx.CPU)
		checkFloat32Gather(t)
	})
}

// TestGPUQuantizedTableMatchesDequantized is
// TestQuantizedTableMatchesDequantized on the GPU, in the GPU's
// formulation: the quantized embedding's row lookup, the tied and untied
// heads' quantized matmuls and the chunked loss's g·W against the
// dequantized table's float32 model.
func TestGPUQuantizedTableMatchesDequantized(t *testing.T) {
	mlxtest.Run(t, func(t testing.TB) {
		mlxtest.RequireGPU(t)
		if err := mlx.SetDefaultDevice(mlx.GPU); err != nil {
			t.Fatal(err)
		}
	})
	defer mlxtest.Run(t, func(t testing.TB) { mlx.SetDefaultDevice(mlx.CPU) })
	checkQuantizedTable(t, 1e-4, 2e-3, 1e-3)
}
