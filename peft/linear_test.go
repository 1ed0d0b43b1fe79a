package peft

import (
	"fmt"
	"math"
	"testing"

	"github.com/posttrainllm/posttrainllm/internal/mlxtest"
	"github.com/posttrainllm/posttrainllm/mlx"
	"github.com/posttrainllm/posttrainllm/model"
)

// quantModel is a model whose projections' input sides (64 and 128) are
// multiples of every group size.
func quantModel(t testing.TB) *model.Transformer { return swigluModel(t, 2, 64, 128) }

// swigluModel is a SwiGLU model with grouped-query attention (4 heads, 2
// KV heads) of the given layers, width d and MLP hidden size.
func swigluModel(t testing.TB, layers, d, hidden int) *model.Transformer {
	t.Helper()
	m, err := model.New(model.Config{VocabSize: 61, DModel: d, Layers: layers, Heads: 4, KVHeads: 2, Context: 8,
		MLPHidden: hidden, Norm: model.NormRMS, MLP: model.MLPSwiGLU})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// adapterLossAndGrads returns loss(base, adapter) and its gradients with
// respect to the adapter arrays, as float64s.
func adapterLossAndGrads(t testing.TB, loss func(base, ad []*mlx.Array) *mlx.Array, base, ad []*mlx.Array) (float64, [][]float64) {
	t.Helper()
	n := len(ad)
	argnums := make([]int, n)
	for i := range argnums {
		argnums[i] = i
	}
	vg, err := mlx.ValueAndGrad(func(in []*mlx.Array) ([]*mlx.Array, error) {
		return []*mlx.Array{loss(in[n:], in[:n])}, nil
	}, argnums...)
	if err != nil {
		t.Fatal(err)
	}
	defer vg.Free()
	vals, grads, err := vg.Call(append(append([]*mlx.Array{}, ad...), base...)...)
	if err != nil {
		t.Fatal(err)
	}
	v, err := vals[0].Item()
	if err != nil {
		t.Fatal(err)
	}
	out := make([][]float64, n)
	for i, g := range grads {
		for _, f := range floats(t, g) {
			out[i] = append(out[i], float64(f))
		}
	}
	return v, out
}

func closeGrads(t testing.TB, label string, a *Adapter, got, want [][]float64, tol float64) {
	t.Helper()
	for i := range want {
		scale := 1e-3
		for _, v := range want[i] {
			scale = math.Max(scale, math.Abs(v))
		}
		for j := range want[i] {
			if d := math.Abs(got[i][j] - want[i][j]); d > tol*scale {
				t.Fatalf("%s: d loss/d %s[%d] = %g, want %g", label, a.Specs[i].Name, j, got[i][j], want[i][j])
			}
		}
	}
}

// TestUnmergedEqualsMerged: the loss through the unmerged Linears, and its
// gradients with respect to every adapter array, equal those of the merged
// weights (Effective), for LoRA and DoRA, over a float base and over a
// quantized one (whose merged form is the dequantized base's merge).
func TestUnmergedEqualsMerged(t *testing.T) {
	m := quantModel(t)
	x, y := testTokens()
	for _, method := range Methods() {
		for _, bits := range []int{0, 4, 8} {
			label := fmt.Sprintf("%s, bits %d", method, bits)
			mlxtest.Run(t, func(t testing.TB) {
				a, err := New(Config{Method: method, Rank: 4, Alpha: 8, Targets: []string{"wq", "wv", "w2", "w3"}}, m.Specs)
				if err != nil {
					t.Fatal(err)
				}
				base, err := m.Init(3)
				if err != nil {
					t.Fatal(err)
				}
				frozen := base
				if bits > 0 {
					if a.Quant, frozen, err = QuantizeBase(m.Specs, base, 32, bits); err != nil {
						t.Fatal(err)
					}
				}
				ad := small(t, randomize(t, a, 2))
				mean := func(ce *mlx.Array) *mlx.Array { return mlx.Mean(ce) }
				wantLoss, wantGrads := adapterLossAndGrads(t, func(b, ad []*mlx.Array) *mlx.Array {
					return mean(m.TokenLosses(a.Effective(b, ad), x, y))
				}, frozen, ad)
				loss, grads := adapterLossAndGrads(t, func(b, ad []*mlx.Array) *mlx.Array {
					lin, params, err := a.Linears(b, ad)
					if err != nil {
						return mlx.ErrorArray(err)
					}
					ce, _ := m.LossTermsWith(params, lin, x, y)
					return mean(ce)
				}, frozen, ad)
				if math.Abs(loss-wantLoss) > 1e-5*wantLoss {
					t.Fatalf("%s: unmerged loss %.7f, merged %.7f", label, loss, wantLoss)
				}
				// The quantized matmuls (among them the tied head's, over the whole
				// vocabulary) sum in another order than the dequantized weights'
				// matmuls: float32 rounding, a few parts in 10⁴ of the largest gradient.
				tol := 1e-4
				if bits > 0 {
					tol = 3e-4
				}
				closeGrads(t, label, a, grads, wantGrads, tol)
				if bits == 0 {
					return
				}
				// The quantized base changes the loss by no more than its
				// quantization error: 8 bits less than 4, both small and not zero.
				fa := *a
				fa.Quant = nil
				floatLoss, err := mean(m.TokenLosses(fa.Effective(base, ad), x, y)).Item()
				if err != nil {
					t.Fatal(err)
				}
				d := math.Abs(loss - floatLoss)
				if d == 0 || d > map[int]float64{4: 0.05, 8: 0.005}[bits]*floatLoss {
					t.Fatalf("%s: loss %.7f over the quantized base, %.7f over the float one", label, loss, floatLoss)
				}
			})
		}
	}
}

// TestFuseOfQuantizedBaseIsDequantizedMerge: Fuse over a quantized base
// gives exactly the merge of the adapters into the dequantized base.
func TestFuseOfQuantizedBaseIsDequantizedMerge(t *testing.T) {
	m := quantModel(t)
	mlxtest.Run(t, func(t testing.TB) {
		cfg := Config{Method: LoRA, Rank: 4, Alpha: 8, Targets: []string{"all"}}
		q, err := New(cfg, m.Specs)
		if err != nil {
			t.Fatal(err)
		}
		base, err := m.Init(5)
		if err != nil {
			t.Fatal(err)
		}
		var frozen []*mlx.Array
		if q.Quant, frozen, err = QuantizeBase(m.Specs, base, 64, 4); err != nil {
			t.Fatal(err)
		}
		ad := randomize(t, q, 6)
		fused, err := q.Fuse(frozen, ad)
		if err != nil {
			t.Fatal(err)
		}
		plain, err := New(cfg, m.Specs)
		if err != nil {
			t.Fatal(err)
		}
		deq := q.Quant.Dequantize(frozen)
		want := plain.Effective(deq, ad)
		if len(fused) != len(m.Specs) {
			t.Fatalf("fuse gave %d arrays, want %d", len(fused), len(m.Specs))
		}
		for i := range want {
			g, w := floats(t, fused[i]), floats(t, want[i])
			for e := range w {
				if g[e] != w[e] {
					t.Fatalf("%s[%d] = %g fused, %g merged into the dequantized base", m.Specs[i].Name, e, g[e], w[e])
				}
			}
		}
		// And the dequantized base is not the float one: quantization happened.
		same := true
		for _, i := range q.Quant.Indices {
			a, b := floats(t, deq[i]), floats(t, base[i])
			for e := range a {
				same = same && a[e] == b[e]
			}
		}
		if same {
			t.Fatal("the dequantized base equals the float base")
		}
	})
}

func TestQuantizeBaseRefusesBadSettings(t *testing.T) {
	m := quantModel(t)
	mlxtest.Run(t, func(t testing.TB) {
		base, err := m.Init(1)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := QuantizeBase(m.Specs, base, 64, 7); err == nil {
			t.Fatal("7 bits: no error")
		}
		if _, _, err := QuantizeBase(m.Specs, base[1:], 64, 4); err == nil {
			t.Fatal("a short base: no error")
		}
		if _, _, err := QuantizeBase(tinyModel(t).Specs, mustInit(t, tinyModel(t)), 128, 4); err == nil {
			t.Fatal("no projection divisible by 128: no error")
		}
	})
}

func mustInit(t testing.TB, m *model.Transformer) []*mlx.Array {
	t.Helper()
	p, err := m.Init(1)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// small scales adapters by 0.2, so that the adapted model's logits stay of
// the base's size and float32 rounding stays small beside the gradients.
func small(t testing.TB, ad []*mlx.Array) []*mlx.Array {
	t.Helper()
	out := make([]*mlx.Array, len(ad))
	for i, a := range ad {
		out[i] = mlx.MulScalar(a, 0.2)
	}
	if err := mlx.Eval(out...); err != nil {
		t.Fatal(err)
	}
	return out
}

// testTokens are the [2, 8] inputs x and targets y of
// the tests' forward passes, ids below 61.
func testTokens() (x, y *mlx.Array) {
	x = mlx.FromSlice([]int32{1, 5, 9, 2, 60, 7, 3, 3, 4, 8, 15, 16, 23, 42, 0, 11}, 2, 8)
	y = mlx.FromSlice([]int32{5, 9, 2, 60, 7, 3, 3, 1, 8, 15, 16, 23, 42, 0, 11, 4}, 2, 8)
	return x, y
}
