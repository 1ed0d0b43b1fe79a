package peft

import (
	"fmt"
	"slices"
	"testing"

	"github.com/posttrainllm/posttrainllm/internal/mlxtest"
	"github.com/posttrainllm/posttrainllm/mlx"
)

// TestBaseLinearsEqualFreshAdapter: the per-position cross-entropies of
// the base alone (BaseLinears) equal, bit for bit, those of a fresh LoRA
// adapter (B = 0) through Linears, in each layout Linears takes (grouped
// or per projection, a float or a 4-bit base, quantized matmuls or
// dequantized products): a preference fine-tune's reference and its
// policy then tie at the start, as they must. A reference computed another
// way (separate matmuls where the policy stacks them) differs in the last
// bits wherever the BLAS rounds the two shapes differently.
func TestBaseLinearsEqualFreshAdapter(t *testing.T) {
	m := groupModels(t)["swiglu-gqa"]
	x, y := testTokens()
	for _, bits := range []int{0, 4} {
		for _, perProjection := range []bool{false, true} {
			for _, dequantized := range []bool{false, true} {
				label := fmt.Sprintf("bits %d, per projection %v, dequantized products %v", bits, perProjection, dequantized)
				mlxtest.Run(t, func(t testing.TB) {
					a, frozen, _ := groupSetup(t, m, LoRA, bits, []string{"all"})
					a.PerProjection, a.DequantizedProducts = perProjection, dequantized
					ad, err := a.Init(4, frozen)
					if err != nil {
						t.Fatal(err)
					}
					defer mlx.Free(ad...)
					ce := func(lin func() ([]float32, error)) []float32 {
						v, err := lin()
						if err != nil {
							t.Fatal(err)
						}
						return v
					}
					policy := ce(func() ([]float32, error) {
						lin, params, err := a.Linears(frozen, ad)
						if err != nil {
							return nil, err
						}
						c, _ := m.LossTermsWith(params, lin, x, y)
						return c.Float32s()
					})
					reference := ce(func() ([]float32, error) {
						lin, params, err := a.BaseLinears(frozen)
						if err != nil {
							return nil, err
						}
						c, _ := m.LossTermsWith(params, lin, x, y)
						return c.Float32s()
					})
					if !slices.Equal(policy, reference) {
						t.Fatalf("%s: fresh adapter %v, base alone %v", label, policy, reference)
					}
				})
			}
		}
	}
}
