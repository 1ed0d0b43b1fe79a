package model

import (
	"testing"

	"github.com/posttrainllm/posttrainllm/internal/mlxtest"
	"github.com/posttrainllm/posttrainllm/mlx"
)

// With the written projection VJPs every weight's gradient comes out
// row-major, as the flat layout reshapes it; with MLX's matmul VJP the
// projections' gradients are transposed views (which the reshape copies).
func TestProjectionGradientsAreRowMajor(t *testing.T) {
	mlxtest.Run(t, func(t testing.TB) {
		c := smallConfig()
		c.TiedEmbeddings = true
		m, params := initModel(t, c, 2)
		defer mlx.Free(params...)
		x, y := tokens(t, 2, 12, c.VocabSize, 1), tokens(t, 2, 12, c.VocabSize, 4)
		transposed := func(written bool) []string {
			f := formulation{stackedProjections: true, addMMResidual: true, writtenProjectionVJPs: written}
			val, grads := valueAndGrads(t, func(p []*mlx.Array, x, y *mlx.Array) *mlx.Array { return m.loss(p, x, y, f) }, params, x, y)
			defer mlx.Free(append(grads, val)...)
			var names []string
			for i, g := range grads {
				rows, err := g.RowContiguous()
				if err != nil {
					t.Fatal(err)
				}
				if !rows {
					names = append(names, m.Specs[i].Name)
				}
			}
			return names
		}
		if got := transposed(true); len(got) != 0 {
			t.Fatalf("written projection VJPs: gradients of %v are not row-major", got)
		}
		if got := transposed(false); len(got) == 0 {
			t.Fatal("MLX's matmul VJP: every gradient row-major; the written VJPs would save no copy")
		} else {
			t.Logf("MLX's matmul VJP: transposed gradients of %v", got)
		}
	})
}
