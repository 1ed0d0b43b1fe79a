package mlx

import (
	"fmt"
	"math"
	"testing"
)

// TestMatmulOneRowOrColumn checks products with one row or one column,
// which the CPU's BLAS shim (cmd/install-mlx) hands to sgemv instead of
// sgemm, in every layout MLX passes to BLAS: each operand stored as is or
// transposed, AddMM's beta with and without c, and a c full of NaN that a
// beta of zero must ignore. The reference is float64 on the host.
func TestMatmulOneRowOrColumn(t *testing.T) {
	shapes := [][3]int{{1, 37, 19}, {23, 1, 19}, {1, 1, 19}, {1, 5, 1}, {1, 300, 64}, {300, 1, 64}}
	onMLX(t, func() {
		for i, s := range shapes {
			M, N, K := s[0], s[1], s[2]
			av, bv, cv := lcg(uint64(3*i+1), M*K), lcg(uint64(3*i+2), K*N), lcg(uint64(3*i+3), M*N)
			want := func(alpha, beta float64, c []float64) []float64 {
				out := make([]float64, M*N)
				for m := range M {
					for n := range N {
						var dot float64
						for k := range K {
							dot += av[m*K+k] * bv[k*N+n]
						}
						out[m*N+n] = alpha * dot
						if beta != 0 {
							out[m*N+n] += beta * c[m*N+n]
						}
					}
				}
				return out
			}
			for _, ta := range []bool{false, true} {
				for _, tb := range []bool{false, true} {
					// The operand stored transposed and viewed back: MLX
					// passes it to BLAS as transposed.
					a, b := f32(av, M, K), f32(bv, K, N)
					if ta {
						a = Transpose(f32(transposed(av, M, K), K, M))
					}
					if tb {
						b = Transpose(f32(transposed(bv, K, N), N, K))
					}
					name := fmt.Sprintf("[%d,%d]x[%d,%d] ta=%v tb=%v", M, K, K, N, ta, tb)
					checkClose(t, name, Matmul(a, b), []int{M, N}, want(1, 0, nil), 1e-5)
					checkClose(t, name+" addmm", AddMM(f32(cv, M, N), a, b, 0.5, 2), []int{M, N}, want(0.5, 2, cv), 1e-5)
					nan := make([]float64, M*N)
					for j := range nan {
						nan[j] = math.NaN()
					}
					checkClose(t, name+" addmm beta 0", AddMM(f32(nan, M, N), a, b, 1, 0), []int{M, N}, want(1, 0, nil), 1e-5)
				}
			}
		}
	})
}

// transposed returns the [cols, rows] transpose of a row-major [rows, cols].
func transposed(v []float64, rows, cols int) []float64 {
	out := make([]float64, len(v))
	for r := range rows {
		for c := range cols {
			out[c*rows+r] = v[r*cols+c]
		}
	}
	return out
}
