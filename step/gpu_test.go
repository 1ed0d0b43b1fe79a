//go:build gpu

// GPU tests: built only with -tags gpu (make test-gpu-bin) and run on a
// machine with a CUDA GPU and libmlx.so from mlx-cuda-13 (scripts/gpu-bench.sh).
// They fail, never skip, when no GPU is there.

package step

import (
	"math"
	"testing"

	"github.com/posttrainllm/posttrainllm/internal/mlxtest"
	"github.com/posttrainllm/posttrainllm/mlx"
)

// TestGPUGroupGradsMatchMLXOps runs the group gradient kernel
// (groupGradCopy) and MLX's operations (groupGradOps) on the same parts,
// in bf16 and float32, with and without earlier sums: the float32 sums
// must be equal to the bit, for parts of odd sizes, a scalar, matrices
// and a transposed (non-contiguous) matrix.
func TestGPUGroupGradsMatchMLXOps(t *testing.T) {
	mlxtest.Run(t, func(t testing.TB) {
		mlxtest.RequireGPU(t)
		if err := mlx.SetDefaultDevice(mlx.GPU); err != nil {
			t.Fatal(err)
		}
		shapes := [][]int{{37, 5}, {1}, {257}, {64, 96}, {3, 4, 5}, {96, 64}}
		for _, dtype := range []mlx.Dtype{mlx.BFloat16, mlx.Float32} {
			keys := mlx.RandomSplit(mlx.RandomKey(3), len(shapes)+1)
			parts := make([]*mlx.Array, len(shapes))
			size := 0
			for i, s := range shapes {
				parts[i] = mlx.RandomNormal(s, dtype, 0, 1, keys[i])
				size += parts[i].Size()
			}
			parts[len(parts)-1] = mlx.Transpose(parts[len(parts)-1]) // a weight gradient's view
			sum := mlx.RandomNormal([]int{size}, mlx.Float32, 0, 1, keys[len(shapes)])
			for _, s := range []*mlx.Array{nil, sum} {
				got, err := groupGradCopy(parts, s)
				if err != nil {
					t.Fatal(err)
				}
				want := groupGradOps(parts, s)
				g, err := got.Float32s()
				if err != nil {
					t.Fatal(err)
				}
				w, err := want.Float32s()
				if err != nil {
					t.Fatal(err)
				}
				if len(g) != size || len(w) != size {
					t.Fatalf("%v: %d and %d elements, want %d", dtype, len(g), len(w), size)
				}
				for i := range w {
					if math.Float32bits(g[i]) != math.Float32bits(w[i]) {
						t.Fatalf("%v, sum %t: element %d is %g from the kernel, %g from MLX's operations", dtype, s != nil, i, g[i], w[i])
					}
				}
			}
		}
	})
}
