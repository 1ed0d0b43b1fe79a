package model

import (
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/posttrainllm/posttrainllm/internal/mlxtest"
	"github.com/posttrainllm/posttrainllm/mlx"
)

// quantizedTable returns the Linear of a [V, D] table quantized to bits in
// groups of 32, as a frozen quantized base holds it (peft.Quantized):
// rows gathered then dequantized, logits and their input gradient by
// quantized matmuls; and the dequantized table, evaluated.
func quantizedTable(t testing.TB, table *mlx.Array, bits int) (Linear, *mlx.Array) {
	t.Helper()
	w, sc, b := mlx.Quantize(table, 32, bits)
	deq := mlx.Dequantize(w, sc, b, 32, bits)
	if err := mlx.Eval(w, sc, b, deq); err != nil {
		t.Fatal(err)
	}
	return Linear{
		Arrays: []*mlx.Array{w, sc, b},
		Rows: func(ids *mlx.Array, a []*mlx.Array) *mlx.Array {
			return mlx.Dequantize(mlx.Take(a[0], ids, 0), mlx.Take(a[1], ids, 0), mlx.Take(a[2], ids, 0), 32, bits)
		},
		Apply: func(x *mlx.Array, a []*mlx.Array) *mlx.Array {
			return mlx.QuantizedMatmul(x, mlx.StopGradient(a[0]), mlx.StopGradient(a[1]), mlx.StopGradient(a[2]), true, 32, bits)
		},
		ApplyT: func(g *mlx.Array, a []*mlx.Array) *mlx.Array {
			return mlx.QuantizedMatmul(g, mlx.StopGradient(a[0]), mlx.StopGradient(a[1]), mlx.StopGradient(a[2]), false, 32, bits)
		},
	}, deq
}

// A token embedding (tied, and untied with its output head) held quantized
// through Linears gives the loss, logits and gradients of the model whose
// table is the dequantized one, to float32 rounding, through the whole
// logits and through the chunked loss alike: the rows looked up are the
// dequantized table's rows, the logits are the quantized matmul x·Wᵀ, and
// the gradient that reaches the blocks (through the hidden states) is
// g·W, MLX's VJP of the quantized matmul or the chunked loss's ApplyT.
func TestQuantizedTableMatchesDequantized(t *testing.T) {
	checkQuantizedTable(t, 1e-5, 3e-4, 1e-4)
}

// checkQuantizedTable is TestQuantizedTableMatchesDequantized on the
// default device, with tolerances relative to the loss, to the largest
// gradient of each parameter and to each logit.
func checkQuantizedTable(t *testing.T, lossTol, gradTol, logitTol float64) {
	x := mlx.FromSlice([]int32{1, 5, 9, 2, 60, 7, 3, 3, 4, 8, 15, 16, 23, 42, 0, 11}, 2, 8)
	y := mlx.FromSlice([]int32{5, 9, 2, 60, 7, 3, 3, 1, 8, 15, 16, 23, 42, 0, 11, 4}, 2, 8)
	w := mlx.FromSlice([]float32{0, 1, 1, 1, 1, 1, 1, 1, 0, 0, 1, 1, 1, 1, 1, 1}, 2, 8)
	for _, tied := range []bool{true, false} {
		for _, chunk := range []int{0, 5} {
			label := fmt.Sprintf("tied %v, loss chunk %d", tied, chunk)
			mlxtest.Run(t, func(t testing.TB) {
				m, err := New(Config{VocabSize: 61, PadVocabTo: 64, DModel: 64, Layers: 2, Heads: 4, KVHeads: 2, Context: 8,
					MLPHidden: 128, Norm: NormRMS, MLP: MLPSwiGLU, TiedEmbeddings: tied})
				if err != nil {
					t.Fatal(err)
				}
				m.Memory.LossChunk = chunk
				params, err := m.Init(7)
				if err != nil {
					t.Fatal(err)
				}
				quantized := []int{0}
				if !tied {
					quantized = append(quantized, slices.IndexFunc(m.Specs, func(s ParamSpec) bool { return s.Kind == Head }))
				}
				lin, deqParams, qParams := Linears{}, slices.Clone(params), slices.Clone(params)
				for _, i := range quantized {
					l, deq := quantizedTable(t, params[i], 4)
					lin[i], deqParams[i], qParams[i] = l, deq, l.Arrays[0]
				}
				var argnums []int
				for i, s := range m.Specs {
					if s.Kind != Embedding && s.Kind != Head {
						argnums = append(argnums, i)
					}
				}
				objective := func(lin Linears) func(p []*mlx.Array) *mlx.Array {
					return func(p []*mlx.Array) *mlx.Array {
						ce, lse := m.LossTermsWith(p, lin, x, y)
						weighted := mlx.Divide(mlx.Sum(mlx.Multiply(ce, w)), mlx.Sum(w))
						return mlx.Add(weighted, mlx.MulScalar(mlx.Mean(mlx.Square(lse)), 1e-3))
					}
				}
				wantLoss, wantGrads := paramLossAndGrads(t, objective(nil), deqParams, argnums)
				loss, grads := paramLossAndGrads(t, objective(lin), qParams, argnums)
				if math.Abs(loss-wantLoss) > lossTol*wantLoss {
					t.Fatalf("%s: loss %.7f over the quantized table, %.7f over the dequantized one", label, loss, wantLoss)
				}
				for k, i := range argnums {
					scale := 1e-3
					for _, v := range wantGrads[k] {
						scale = math.Max(scale, math.Abs(v))
					}
					for e := range wantGrads[k] {
						if d := math.Abs(grads[k][e] - wantGrads[k][e]); d > gradTol*scale {
							t.Fatalf("%s: d loss/d %s[%d] = %g over the quantized table, %g over the dequantized one",
								label, m.Specs[i].Name, e, grads[k][e], wantGrads[k][e])
						}
					}
				}
				got, want := m.LogitsWith(qParams, lin, x), m.Logits(deqParams, x)
				if err := mlx.Eval(got, want); err != nil {
					t.Fatal(err)
				}
				g, wl := floatsOf(t, got), floatsOf(t, want)
				for e := range wl {
					if math.IsInf(wl[e], -1) != math.IsInf(g[e], -1) || (!math.IsInf(wl[e], -1) && math.Abs(g[e]-wl[e]) > logitTol*(1+math.Abs(wl[e]))) {
						t.Fatalf("%s: logit %d = %g over the quantized table, %g over the dequantized one", label, e, g[e], wl[e])
					}
				}
			})
		}
	}
}

// A Linear of the token embedding without Rows, or of a norm gain, is
// refused by name.
func TestQuantizedTableLinearRefusals(t *testing.T) {
	m, err := New(Config{VocabSize: 64, DModel: 64, Layers: 1, Heads: 4, Context: 8, TiedEmbeddings: true})
	if err != nil {
		t.Fatal(err)
	}
	apply := func(x *mlx.Array, a []*mlx.Array) *mlx.Array { return x }
	if err := m.checkLinear(0, Linear{Apply: apply}); err == nil {
		t.Error("a token embedding's Linear without Rows was accepted")
	}
	ni := slices.IndexFunc(m.Specs, func(s ParamSpec) bool { return s.Kind == Norm })
	if err := m.checkLinear(ni, Linear{Apply: apply}); err == nil {
		t.Errorf("a Linear of %s was accepted", m.Specs[ni].Name)
	}
	rows := func(ids *mlx.Array, a []*mlx.Array) *mlx.Array { return ids }
	if err := m.checkLinear(0, Linear{Rows: rows}); err == nil {
		t.Error("a tied token embedding's Linear without Apply was accepted")
	}
	if err := m.checkLinear(0, Linear{Rows: rows, Apply: apply}); err != nil {
		t.Errorf("a tied token embedding's Linear with Rows and Apply: %v", err)
	}
}

// paramLossAndGrads returns loss(params) and its gradients with respect to the
// parameters at argnums, as float64s.
func paramLossAndGrads(t testing.TB, loss func(p []*mlx.Array) *mlx.Array, params []*mlx.Array, argnums []int) (float64, [][]float64) {
	t.Helper()
	vg, err := mlx.ValueAndGrad(func(in []*mlx.Array) ([]*mlx.Array, error) {
		return []*mlx.Array{loss(in)}, nil
	}, argnums...)
	if err != nil {
		t.Fatal(err)
	}
	defer vg.Free()
	vals, grads, err := vg.Call(params...)
	if err != nil {
		t.Fatal(err)
	}
	v, err := vals[0].Item()
	if err != nil {
		t.Fatal(err)
	}
	out := make([][]float64, len(grads))
	for k, g := range grads {
		out[k] = floatsOf(t, g)
	}
	return v, out
}

// floatsOf returns a's elements as float64s.
func floatsOf(t testing.TB, a *mlx.Array) []float64 {
	t.Helper()
	f, err := mlx.AsType(a, mlx.Float32).Float32s()
	if err != nil {
		t.Fatal(err)
	}
	out := make([]float64, len(f))
	for i, v := range f {
		out[i] = float64(v)
	}
	return out
}
