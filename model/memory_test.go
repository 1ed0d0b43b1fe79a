package model

import (
	"fmt"
	"math"
	"testing"

	"github.com/posttrainllm/posttrainllm/internal/mlxtest"
	"github.com/posttrainllm/posttrainllm/mlx"
)

// sameLossAndGrads fails unless loss and grads equal want's within
// float32 rounding.
func sameLossAndGrads(t testing.TB, label string, m *Transformer, loss, wantLoss float64, grads, wantGrads [][]float64) {
	t.Helper()
	if math.Abs(loss-wantLoss) > 1e-5*wantLoss {
		t.Fatalf("%s: loss %.7f, want %.7f", label, loss, wantLoss)
	}
	for i, g := range grads {
		scale := 1e-3
		for _, v := range wantGrads[i] {
			scale = math.Max(scale, math.Abs(v))
		}
		for j := range g {
			if d := math.Abs(g[j] - wantGrads[i][j]); d > 1e-5*scale {
				t.Fatalf("%s: d loss/d %s[%d] = %g, want %g", label, m.Specs[i].Name, j, g[j], wantGrads[i][j])
			}
		}
	}
}

// meanTerms is the loss through LossTerms: mean cross-entropy plus a
// z-loss-like term, so both outputs carry gradients.
func meanTerms(m *Transformer) func(p []*mlx.Array, x, y *mlx.Array) *mlx.Array {
	return func(p []*mlx.Array, x, y *mlx.Array) *mlx.Array {
		ce, lse := m.LossTerms(p, x, y)
		return mlx.Add(mlx.Mean(ce), mlx.MulScalar(mlx.Mean(mlx.Square(lse)), 1e-2))
	}
}

// TestMemoryOptionsKeepLossAndGradients: gradient checkpointing and the
// chunked loss (with a chunk that does not divide the positions) give the
// loss and gradients of the plain model, for every family, through Loss
// and LossTerms, in the plain formulation and the GPU's.
func TestMemoryOptionsKeepLossAndGradients(t *testing.T) {
	gpuLike := formulation{writtenGELU: true, stackedProjections: true, addMMResidual: true, writtenProjectionVJPs: true}
	for name, c := range familyConfigs() {
		mlxtest.Run(t, func(t testing.TB) {
			m, params := initModel(t, c, 5)
			defer mlx.Free(params...)
			x, y := tokens(t, 2, 12, c.VocabSize, 1), tokens(t, 2, 12, c.VocabSize, 6)
			wantLoss, wantGrads := lossAndGrads(t, func(p []*mlx.Array, x, y *mlx.Array) *mlx.Array {
				return m.loss(p, x, y, formulation{})
			}, params, x, y)
			wantTerms, wantTermGrads := lossAndGrads(t, meanTerms(m), params, x, y)
			for _, mem := range []Memory{{Checkpoint: true}, {LossChunk: 5}, {LossChunk: 24}, {Checkpoint: true, LossChunk: 7}} {
				mm := *m
				mm.Memory = mem
				for _, f := range []formulation{{}, gpuLike} {
					label := fmt.Sprintf("%s, %+v, %+v", name, mem, f)
					loss, grads := lossAndGrads(t, func(p []*mlx.Array, x, y *mlx.Array) *mlx.Array {
						return mm.loss(p, x, y, f)
					}, params, x, y)
					sameLossAndGrads(t, label, m, loss, wantLoss, grads, wantGrads)
				}
				loss, grads := lossAndGrads(t, meanTerms(&mm), params, x, y)
				sameLossAndGrads(t, fmt.Sprintf("%s, %+v, LossTerms", name, mem), m, loss, wantTerms, grads, wantTermGrads)
			}
		})
	}
}

// TestLinearsReplaceProjections computes every block projection through a
// Linear that multiplies by its own array (the weight passed as a Linear
// array, the parameter slot holding an unrelated placeholder): the loss
// equals the plain model's, and each Linear array's gradient equals the
// weight's, also with gradient checkpointing (which must pass the Linears'
// arrays into the recomputed block).
func TestLinearsReplaceProjections(t *testing.T) {
	for name, c := range familyConfigs() {
		mlxtest.Run(t, func(t testing.TB) {
			m, params := initModel(t, c, 7)
			defer mlx.Free(params...)
			x, y := tokens(t, 2, 12, c.VocabSize, 3), tokens(t, 2, 12, c.VocabSize, 4)
			wantLoss, wantGrads := lossAndGrads(t, meanTerms(m), params, x, y)
			var idx []int
			for i, s := range m.Specs {
				if s.Kind == Matrix && isBlockProjection(s.Name) {
					idx = append(idx, i)
				}
			}
			if len(idx) < 6 {
				t.Fatalf("%s: %d block projections, want at least 6", name, len(idx))
			}
			n := len(params)
			apply := func(x *mlx.Array, a []*mlx.Array) *mlx.Array { return mlx.Matmul(x, mlx.Transpose(a[0])) }
			for _, mem := range []Memory{{}, {Checkpoint: true}} {
				mm := *m
				mm.Memory = mem
				// Inputs: params with placeholders in the projections' slots, then the weights.
				in := append([]*mlx.Array{}, params...)
				for _, i := range idx {
					in[i] = mlx.Zeros([]int{1}, mlx.Float32)
					in = append(in, params[i])
				}
				loss, grads := lossAndGrads(t, func(p []*mlx.Array, x, y *mlx.Array) *mlx.Array {
					lin := Linears{}
					for k, i := range idx {
						lin[i] = Linear{Arrays: []*mlx.Array{p[n+k]}, Apply: apply}
					}
					ce, lse := mm.LossTermsWith(p[:n], lin, x, y)
					return mlx.Add(mlx.Mean(ce), mlx.MulScalar(mlx.Mean(mlx.Square(lse)), 1e-2))
				}, in, x, y)
				// The weights' gradients arrive at the Linears' arrays.
				for k, i := range idx {
					grads[i] = grads[n+k]
				}
				sameLossAndGrads(t, fmt.Sprintf("%s, %+v", name, mem), m, loss, wantLoss, grads[:n], wantGrads)
			}
		})
	}
}

func TestLinearsRefuseNonProjections(t *testing.T) {
	mlxtest.Run(t, func(t testing.TB) {
		m, params := initModel(t, smallConfig(), 1)
		defer mlx.Free(params...)
		x := tokens(t, 1, 4, m.Config.VocabSize, 1)
		ce, _ := m.LossTermsWith(params, Linears{0: {}}, x, x) // 0 is the token embedding
		if ce.Err() == nil {
			t.Fatal("a Linear for the token embedding: no error")
		}
	})
}

// TestBlockFieldsListEveryArray: the checkpointed block's inputs are every
// array field of block that is set, so none becomes a constant of the
// recomputation (which would lose its gradient).
func TestBlockFieldsListEveryArray(t *testing.T) {
	mlxtest.Run(t, func(t testing.TB) {
		m, params := initModel(t, familyConfigs()["gpt2"], 1)
		defer mlx.Free(params...)
		w, err := m.unpack(params)
		if err != nil {
			t.Fatal(err)
		}
		b := w.blocks[0]
		got := map[*mlx.Array]bool{}
		for _, p := range b.fields() {
			got[*p] = true
		}
		want := 0
		for _, a := range []*mlx.Array{b.attnNorm, b.attnNormB, b.wq, b.wk, b.wv, b.wo, b.mlpNorm, b.mlpNormB, b.w1, b.w2,
			b.bq, b.bk, b.bv, b.bo, b.b1, b.b2} {
			if a == nil {
				t.Fatal("a gpt2 block lacks an array it has")
			}
			want++
			if !got[a] {
				t.Fatalf("fields misses one of the block's arrays (%v)", a.Shape())
			}
		}
		if len(got) != want {
			t.Fatalf("fields lists %d arrays, the block holds %d", len(got), want)
		}
	})
}
