package model

import (
	"fmt"
	"math"
	"testing"

	"github.com/posttrainllm/posttrainllm/internal/mlxtest"
	"github.com/posttrainllm/posttrainllm/mlx"
)

// referenceLoss is Transformer's loss written the plain way, op by op: separate
// q, k and v projections, GELU (exact or tanh, as configured) differentiated
// through its ops, residual additions after the projections, and the
// float32 cross-entropy. Every formulation of the model (one qkv matmul,
// GELU's written-out derivative, residuals as multiply-adds, the fused
// cross-entropy, in every combination) must give the same loss and
// gradients.
func referenceLoss(m *Transformer, params []*mlx.Array, x, y *mlx.Array) *mlx.Array {
	w, err := m.unpack(params)
	if err != nil {
		return mlx.ErrorArray(err)
	}
	c := m.Config
	eps := float32(c.NormEps)
	B, T, hd := x.Dim(0), x.Dim(1), c.HeadDim()
	heads := func(t *mlx.Array) *mlx.Array {
		return mlx.Transpose(mlx.Reshape(t, B, T, c.Heads, hd), 0, 2, 1, 3)
	}
	rope := func(t *mlx.Array) *mlx.Array { return mlx.RoPE(t, hd, false, float32(c.RoPEBase), 1, 0) }
	gelu := func(t *mlx.Array) *mlx.Array {
		return mlx.Multiply(mlx.MulScalar(t, 0.5), mlx.AddScalar(mlx.Erf(mlx.MulScalar(t, 1/math.Sqrt2)), 1))
	}
	if c.GELU == GELUTanh {
		gelu = func(t *mlx.Array) *mlx.Array {
			cube := mlx.Multiply(mlx.Multiply(t, t), t)
			u := mlx.MulScalar(mlx.Add(t, mlx.MulScalar(cube, 0.044715)), math.Sqrt(2/math.Pi))
			return mlx.Multiply(mlx.MulScalar(t, 0.5), mlx.AddScalar(mlx.Tanh(u), 1))
		}
	}
	linear := func(t, w *mlx.Array) *mlx.Array { return mlx.Matmul(t, mlx.Transpose(w)) } // w stored [out, in]
	h := mlx.Take(w.tokEmb, x, 0)
	if w.embedNorm != nil {
		h = mlx.RMSNorm(h, w.embedNorm, eps)
	}
	for _, b := range w.blocks {
		a := mlx.RMSNorm(h, b.attnNorm, eps)
		q, k, v := rope(heads(linear(a, b.wq))), rope(heads(linear(a, b.wk))), heads(linear(a, b.wv))
		o := mlx.ScaledDotProductAttention(q, k, v, float32(1/math.Sqrt(float64(hd))), mlx.CausalMask, nil)
		h = mlx.Add(h, linear(mlx.Reshape(mlx.Transpose(o, 0, 2, 1, 3), B, T, c.DModel), b.wo))
		h = mlx.Add(h, linear(gelu(linear(mlx.RMSNorm(h, b.mlpNorm, eps), b.w1)), b.w2))
	}
	logits := mlx.AsType(linear(mlx.RMSNorm(h, w.norm, eps), w.head), mlx.Float32)
	lse := mlx.LogSumExp(logits, -1)
	target := mlx.Squeeze(mlx.TakeAlongAxis(logits, mlx.ExpandDims(y, -1), -1), -1)
	loss := mlx.Mean(mlx.Subtract(lse, target))
	if c.ZLoss > 0 {
		loss = mlx.Add(loss, mlx.MulScalar(mlx.Mean(mlx.Square(lse)), c.ZLoss))
	}
	return loss
}

// valueAndGrads returns loss(params, x, y) and its gradients with respect
// to every parameter, as arrays the caller frees.
func valueAndGrads(t testing.TB, loss func(p []*mlx.Array, x, y *mlx.Array) *mlx.Array,
	params []*mlx.Array, x, y *mlx.Array) (*mlx.Array, []*mlx.Array) {
	t.Helper()
	n := len(params)
	argnums := make([]int, n)
	for i := range argnums {
		argnums[i] = i
	}
	vg, err := mlx.ValueAndGrad(func(in []*mlx.Array) ([]*mlx.Array, error) {
		return []*mlx.Array{loss(in[:n], in[n], in[n+1])}, nil
	}, argnums...)
	if err != nil {
		t.Fatal(err)
	}
	defer vg.Free()
	vals, grads, err := vg.Call(append(append([]*mlx.Array{}, params...), x, y)...)
	if err != nil {
		t.Fatal(err)
	}
	return vals[0], grads
}

// lossAndGrads returns loss(params, x, y) and its gradients as float64s.
func lossAndGrads(t testing.TB, loss func(p []*mlx.Array, x, y *mlx.Array) *mlx.Array,
	params []*mlx.Array, x, y *mlx.Array) (float64, [][]float64) {
	t.Helper()
	val, grads := valueAndGrads(t, loss, params, x, y)
	defer mlx.Free(append(grads, val)...)
	v, err := val.Item()
	if err != nil {
		t.Fatal(err)
	}
	out := make([][]float64, len(grads))
	for i, g := range grads {
		out[i] = values(t, g)
	}
	return v, out
}

func TestLossAndGradientsMatchThePlainFormulation(t *testing.T) {
	mlxtest.Run(t, func(t testing.TB) {
		for _, variant := range []struct {
			name  string
			tweak func(*Config)
		}{
			{"tied", func(c *Config) {}},
			{"untied with embedding norm", func(c *Config) { c.TiedEmbeddings = false; c.EmbedNorm = true }},
			{"tied, tanh GELU", func(c *Config) { c.GELU = GELUTanh }},
			{"untied, tanh GELU, z-loss", func(c *Config) { c.TiedEmbeddings = false; c.GELU = GELUTanh; c.ZLoss = 1e-3 }},
		} {
			c := smallConfig()
			c.TiedEmbeddings = true
			variant.tweak(&c)
			m, err := New(c)
			if err != nil {
				t.Fatal(err)
			}
			params, err := m.Init(3)
			if err != nil {
				t.Fatal(err)
			}
			x, y := tokens(t, 2, 12, c.VocabSize, 0), tokens(t, 2, 12, c.VocabSize, 5)
			wantLoss, wantGrads := lossAndGrads(t, func(p []*mlx.Array, x, y *mlx.Array) *mlx.Array {
				return referenceLoss(m, p, x, y)
			}, params, x, y)
			for _, f := range allFormulations() {
				name := fmt.Sprintf("%s, %+v", variant.name, f)
				loss, grads := lossAndGrads(t, func(p []*mlx.Array, x, y *mlx.Array) *mlx.Array {
					return m.loss(p, x, y, f)
				}, params, x, y)
				if math.Abs(loss-wantLoss) > 1e-5*wantLoss {
					t.Fatalf("%s: loss %.7f, plain formulation %.7f", name, loss, wantLoss)
				}
				for i, g := range grads {
					scale := 0.0
					for _, v := range wantGrads[i] {
						scale = math.Max(scale, math.Abs(v))
					}
					for j := range g {
						if d := math.Abs(g[j] - wantGrads[i][j]); d > 1e-5*math.Max(scale, 1e-3) {
							t.Fatalf("%s: d loss/d %s[%d] = %g, plain formulation %g", name, m.Specs[i].Name, j, g[j], wantGrads[i][j])
						}
					}
				}
			}
		}
	})
}

// TestPaddedVocabularyChangesNothing pads a 61-token vocabulary to 64 rows:
// the padding logits are −∞, and loss and gradients equal those of the
// unpadded model with the same weights, the padding rows getting none.
func TestPaddedVocabularyChangesNothing(t *testing.T) {
	mlxtest.Run(t, func(t testing.TB) {
		c := smallConfig()
		c.TiedEmbeddings = true
		padded := c
		padded.PadVocabTo = 32
		if got := padded.PaddedVocab(); got != 64 {
			t.Fatalf("PaddedVocab of 61 to a multiple of 32 = %d, want 64", got)
		}
		m, _ := New(c)
		mp, err := New(padded)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := mp.Specs[0].Shape, []int{64, c.DModel}; got[0] != want[0] || got[1] != want[1] {
			t.Fatalf("padded embedding shape %v, want %v", got, want)
		}
		params, _ := m.Init(4)
		pparams, _ := mp.Init(4)
		// The padded model's real rows are the unpadded model's embedding.
		pparams[0] = mlx.Concatenate([]*mlx.Array{params[0], mlx.Slice(pparams[0], []int{61, 0}, []int{64, c.DModel})}, 0)
		for i := 1; i < len(params); i++ {
			pparams[i] = params[i]
		}
		x, y := tokens(t, 2, 12, c.VocabSize, 2), tokens(t, 2, 12, c.VocabSize, 3)
		logits := values(t, mp.Logits(pparams, x))
		for row := 0; row < len(logits)/64; row++ {
			for v := 61; v < 64; v++ {
				if l := logits[row*64+v]; !math.IsInf(l, -1) {
					t.Fatalf("padding logit %d of position %d = %g, want -Inf", v, row, l)
				}
			}
		}
		wantLoss, wantGrads := lossAndGrads(t, m.Loss, params, x, y)
		for _, fused := range []bool{false, true} {
			loss, grads := lossAndGrads(t, func(p []*mlx.Array, x, y *mlx.Array) *mlx.Array {
				return mp.loss(p, x, y, formulation{fusedLoss: fused})
			}, pparams, x, y)
			if math.Abs(loss-wantLoss) > 1e-6*wantLoss {
				t.Fatalf("fused %v: padded loss %.7f, unpadded %.7f", fused, loss, wantLoss)
			}
			emb := grads[0]
			for j, g := range emb {
				want := 0.0
				if j < len(wantGrads[0]) {
					want = wantGrads[0][j]
				}
				if math.Abs(g-want) > 1e-6 {
					t.Fatalf("fused %v: embedding gradient [%d] = %g, want %g", fused, j, g, want)
				}
			}
		}
	})
}

func TestPaddingBiasInEveryComputeDtype(t *testing.T) {
	mlxtest.Run(t, func(t testing.TB) {
		for _, d := range []mlx.Dtype{mlx.Float32, mlx.BFloat16, mlx.Float16} {
			b := paddingBias(3, 5, d)
			if b.Dtype() != d {
				t.Fatalf("bias dtype %v, want %v", b.Dtype(), d)
			}
			got := values(t, b)
			want := []float64{0, 0, 0, math.Inf(-1), math.Inf(-1)}
			for i := range want {
				if got[i] != want[i] {
					t.Fatalf("%v bias %v, want %v", d, got, want)
				}
			}
		}
	})
}

// values returns a's elements as float64s.
func values(t testing.TB, a *mlx.Array) []float64 {
	t.Helper()
	f, err := mlx.AsType(a, mlx.Float32).Float32s()
	if err != nil {
		t.Fatal(err)
	}
	out := make([]float64, len(f))
	for i, x := range f {
		out[i] = float64(x)
	}
	return out
}
