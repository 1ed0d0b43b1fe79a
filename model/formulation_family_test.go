package model

import (
	"fmt"
	"math"
	"testing"

	"github.com/posttrainllm/posttrainllm/internal/mlxtest"
	"github.com/posttrainllm/posttrainllm/mlx"
)

// Every formulation computes the same loss and gradients for every family:
// the stacked q/k/v with biases and grouped-query attention, and the
// residuals with biases, agree with the plain formulation (which the
// Hugging Face tests check against an independent numpy forward pass).
func TestFormulationsAgreeForEveryFamily(t *testing.T) {
	for name, c := range familyConfigs() {
		mlxtest.Run(t, func(t testing.TB) {
			m, params := initModel(t, c, 5)
			defer mlx.Free(params...)
			x, y := tokens(t, 2, 12, c.VocabSize, 1), tokens(t, 2, 12, c.VocabSize, 6)
			wantLoss, wantGrads := lossAndGrads(t, func(p []*mlx.Array, x, y *mlx.Array) *mlx.Array {
				return m.loss(p, x, y, formulation{})
			}, params, x, y)
			for _, f := range allFormulations() {
				label := fmt.Sprintf("%s, %+v", name, f)
				loss, grads := lossAndGrads(t, func(p []*mlx.Array, x, y *mlx.Array) *mlx.Array {
					return m.loss(p, x, y, f)
				}, params, x, y)
				if math.Abs(loss-wantLoss) > 1e-5*wantLoss {
					t.Fatalf("%s: loss %.7f, plain formulation %.7f", label, loss, wantLoss)
				}
				for i, g := range grads {
					scale := 1e-3
					for _, v := range wantGrads[i] {
						scale = math.Max(scale, math.Abs(v))
					}
					for j := range g {
						if d := math.Abs(g[j] - wantGrads[i][j]); d > 1e-5*scale {
							t.Fatalf("%s: d loss/d %s[%d] = %g, plain formulation %g", label, m.Specs[i].Name, j, g[j], wantGrads[i][j])
						}
					}
				}
			}
		})
	}
}
