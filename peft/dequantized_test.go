package peft

import (
	"fmt"
	"math"
	"testing"

	"github.com/posttrainllm/posttrainllm/internal/mlxtest"
	"github.com/posttrainllm/posttrainllm/mlx"
	"github.com/posttrainllm/posttrainllm/model"
)

// TestDequantizedProductsMatchQuantized: over a 4-bit base, the loss and
// the adapters' gradients through Linears whose products dequantize their
// weights (Adapter.DequantizedProducts) equal those through MLX's
// quantized matmuls, for LoRA and DoRA, per projection and grouped.
func TestDequantizedProductsMatchQuantized(t *testing.T) {
	m := groupModels(t)["swiglu-gqa"]
	x, y := testTokens()
	for _, method := range Methods() {
		for _, perProjection := range []bool{true, false} {
			label := fmt.Sprintf("%s, per projection %v", method, perProjection)
			mlxtest.Run(t, func(t testing.TB) {
				a, frozen, ad := groupSetup(t, m, method, 4, []string{"all"})
				a.PerProjection = perProjection
				loss := func(dequantized bool) func(b, ad []*mlx.Array) *mlx.Array {
					return func(b, ad []*mlx.Array) *mlx.Array {
						a.DequantizedProducts = dequantized
						lin, params, err := a.Linears(b, ad)
						if err != nil {
							return mlx.ErrorArray(err)
						}
						ce, _ := m.LossTermsWith(params, lin, x, y)
						return mlx.Mean(ce)
					}
				}
				wantLoss, wantGrads := adapterLossAndGrads(t, loss(false), frozen, ad)
				got, grads := adapterLossAndGrads(t, loss(true), frozen, ad)
				if math.Abs(got-wantLoss) > 1e-5*wantLoss {
					t.Fatalf("%s: loss %.7f with dequantized products, %.7f with quantized matmuls", label, got, wantLoss)
				}
				closeGrads(t, label, a, grads, wantGrads, 1e-4)
			})
		}
	}
}

// TestDequantizedHeadMatchesQuantized: with a 4-bit output head (the
// tied token embedding, or an untied head) and the loss chunked, the loss
// and the adapters' gradients with the head dequantized once per pass
// (Adapter.DequantizedHead, model.Linear.Dense) equal those through MLX's
// quantized matmuls chunk by chunk.
func TestDequantizedHeadMatchesQuantized(t *testing.T) {
	x, y := testTokens()
	for _, tied := range []bool{false, true} {
		mlxtest.Run(t, func(t testing.TB) {
			m, err := model.New(model.Config{VocabSize: 61, DModel: 64, Layers: 2, Heads: 4, KVHeads: 2, Context: 8,
				MLPHidden: 128, Norm: model.NormRMS, MLP: model.MLPSwiGLU, TiedEmbeddings: tied})
			if err != nil {
				t.Fatal(err)
			}
			m.Memory.LossChunk = 5 // 16 rows: chunks of 5, 5, 5 and 1
			a, frozen, ad := groupSetup(t, m, LoRA, 4, []string{"all"})
			head := m.Specs[len(m.Specs)-1].Name
			if tied {
				head = model.TokenEmbeddingName
			}
			loss := func(dense bool) func(b, ad []*mlx.Array) *mlx.Array {
				return func(b, ad []*mlx.Array) *mlx.Array {
					a.DequantizedHead = dense
					lin, params, err := a.Linears(b, ad)
					if err != nil {
						return mlx.ErrorArray(err)
					}
					for i, l := range lin {
						if m.Specs[i].Name == head && (l.Dense != nil) != dense {
							return mlx.ErrorArray(fmt.Errorf("the Linear of %s has Dense %t, want %t", head, l.Dense != nil, dense))
						}
					}
					ce, _ := m.LossTermsWith(params, lin, x, y)
					return mlx.Mean(ce)
				}
			}
			wantLoss, wantGrads := adapterLossAndGrads(t, loss(false), frozen, ad)
			got, grads := adapterLossAndGrads(t, loss(true), frozen, ad)
			label := fmt.Sprintf("tied %t", tied)
			if math.Abs(got-wantLoss) > 1e-5*wantLoss {
				t.Fatalf("%s: loss %.7f with the head dequantized, %.7f with quantized matmuls", label, got, wantLoss)
			}
			closeGrads(t, label, a, grads, wantGrads, 1e-4)
		})
	}
}

// TestDequantizedStepKeepsNoFloatBase: a compiled LoRA value and gradient
// over a 4-bit base with dequantized products peaks no higher than with
// quantized matmuls by more than half the float size of the dequantized
// weights, on a model whose frozen weights are most of its memory: a
// weight dequantized for the forward pass must not live to the backward
// one (the products would then hold the base in float, the memory
// quantizing saves).
func TestDequantizedStepKeepsNoFloatBase(t *testing.T) {
	m := weightHeavyModel(t)
	x, _ := testTokens()
	mlxtest.Run(t, func(t testing.TB) {
		a, frozen, ad := groupSetup(t, m, LoRA, 4, []string{"all"})
		a.PerProjection = true
		linears := func(dequantized bool) func(b, ad []*mlx.Array) (model.Linears, []*mlx.Array, error) {
			return func(b, ad []*mlx.Array) (model.Linears, []*mlx.Array, error) {
				a.DequantizedProducts = dequantized
				return a.Linears(b, ad)
			}
		}
		quantized := compiledStepPeak(t, m, linears(false), frozen, ad, x)
		dequantized := compiledStepPeak(t, m, linears(true), frozen, ad, x)
		var float uint64
		for _, i := range a.Targets {
			float += uint64(4 * a.Base[i].Shape[0] * a.Base[i].Shape[1])
		}
		t.Logf("peak: dequantized %d, quantized %d bytes; the projections in float32 %d bytes", dequantized, quantized, float)
		if dequantized > quantized+float/2 {
			t.Fatalf("dequantized products peak at %d bytes, quantized %d: %d more, the projections in float32 being %d",
				dequantized, quantized, dequantized-quantized, float)
		}
	})
}
