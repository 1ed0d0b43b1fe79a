package model

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/posttrainllm/posttrainllm/mlx"
)

// LossTermsAt gives the terms LossTerms gives at the chosen positions,
// and a loss weighted over those positions has the gradients of the same
// weights spread over the full [B, T] terms: with the whole logits and
// chunked, through the model's own parameters and through a Linear,
// with positions chosen out of order and twice.
func TestLossTermsAtMatchesLossTermsAtThosePositions(t *testing.T) {
	const B, T, C = 3, 9, 4
	at := [][]int32{{5, 6, 7, 8}, {0, 1, 2, 3}, {8, 2, 2, 4}}
	wAt := []float32{1, 0.5, 0.25, 2, 0, 1, 1, 3, 0.5, 1, 2, 1}
	// The same weights on the full positions (a position picked twice
	// weighs the sum).
	wFull := make([]float32, B*T)
	flatAt := make([]int32, 0, B*C)
	for b, row := range at {
		for j, col := range row {
			wFull[b*T+int(col)] += wAt[b*C+j]
			flatAt = append(flatAt, col)
		}
	}
	for _, chunk := range []int{0, 4} {
		for _, adapted := range []bool{false, true} {
			t.Run(fmt.Sprintf("chunk%d/adapted=%v", chunk, adapted), func(t *testing.T) {
				c := smallConfig()
				c.PadVocabTo = 32
				m, err := New(c)
				if err != nil {
					t.Fatal(err)
				}
				m.Memory.LossChunk = chunk
				params, err := m.Init(5)
				if err != nil {
					t.Fatal(err)
				}
				x, y := tokens(t, B, T, c.VocabSize, 3), tokens(t, B, T, c.VocabSize, 8)
				atArr := mlx.FromSlice(flatAt, B, C)
				var lin Linears
				if adapted {
					i := slices.IndexFunc(m.Specs, func(s ParamSpec) bool { return s.Kind == Matrix && isBlockProjection(s.Name) })
					apply := func(x *mlx.Array, a []*mlx.Array) *mlx.Array { return mlx.Matmul(x, mlx.Transpose(a[0])) }
					lin = Linears{i: {Arrays: []*mlx.Array{params[i]}, Apply: apply}}
				}
				ce, lse := m.LossTermsWith(params, lin, x, y)
				ceAt, lseAt := m.LossTermsAt(params, lin, x, y, atArr)
				for _, a := range []*mlx.Array{ceAt, lseAt} {
					if !slices.Equal(a.Shape(), []int{B, C}) {
						t.Fatalf("LossTermsAt gave %v, want [%d %d]", a.Shape(), B, C)
					}
				}
				full, fullL, got, gotL := values(t, ce), values(t, lse), values(t, ceAt), values(t, lseAt)
				for b, row := range at {
					for j, col := range row {
						want, wantL := full[b*T+int(col)], fullL[b*T+int(col)]
						if math.Abs(got[b*C+j]-want) > 1e-5 || math.Abs(gotL[b*C+j]-wantL) > 1e-5 {
							t.Fatalf("row %d column %d: terms %.6f, %.6f; LossTerms there %.6f, %.6f", b, col, got[b*C+j], gotL[b*C+j], want, wantL)
						}
					}
				}

				linFor := func(p []*mlx.Array) Linears {
					if !adapted {
						return nil
					}
					out := Linears{}
					for i, l := range lin {
						l.Arrays = []*mlx.Array{p[i]}
						out[i] = l
					}
					return out
				}
				wAtArr, wFullArr := mlx.FromSlice(wAt, B, C), mlx.FromSlice(wFull, B, T)
				viaAt := func(p []*mlx.Array, x, y *mlx.Array) *mlx.Array {
					ce, _ := m.LossTermsAt(p, linFor(p), x, y, atArr)
					return mlx.Sum(mlx.Multiply(ce, wAtArr))
				}
				viaFull := func(p []*mlx.Array, x, y *mlx.Array) *mlx.Array {
					ce, _ := m.LossTermsWith(p, linFor(p), x, y)
					return mlx.Sum(mlx.Multiply(ce, wFullArr))
				}
				sameLossAndGradients(t, m, params, viaAt, viaFull, x, y, 1e-5, 1e-4, "at the positions", "over all positions")
			})
		}
	}
}

func TestLossTermsAtChecksPositions(t *testing.T) {
	m, _ := New(smallConfig())
	params, _ := m.Init(1)
	x, y := tokens(t, 2, 4, 61, 0), tokens(t, 2, 4, 61, 1)
	for _, at := range []*mlx.Array{mlx.FromSlice([]int32{1, 2, 3}, 3), mlx.FromSlice([]float32{1, 2}, 2, 1), mlx.FromSlice([]int32{1, 2, 3}, 3, 1)} {
		ce, _ := m.LossTermsAt(params, nil, x, y, at)
		if err := ce.Err(); err == nil || !strings.Contains(err.Error(), "[batch, positions]") {
			t.Fatalf("positions %v %v: want an error naming [batch, positions], got %v", at.Shape(), at.Dtype(), err)
		}
	}
}

// sameLossAndGradients checks that two losses of the same parameters,
// compiled with their gradients, agree to tol (relative, or absolute below
// 1) on the value and gradTol on every gradient; got and want name them.
func sameLossAndGradients(t *testing.T, m *Transformer, params []*mlx.Array, got, want func(p []*mlx.Array, x, y *mlx.Array) *mlx.Array,
	x, y *mlx.Array, tol, gradTol float64, gotName, wantName string) {
	t.Helper()
	argnums := trainable(m, false)
	_, vGot, gGot := compiledPeak(t, got, params, argnums, x, y)
	_, vWant, gWant := compiledPeak(t, want, params, argnums, x, y)
	if math.Abs(vGot-vWant) > tol*math.Max(1, math.Abs(vWant)) {
		t.Fatalf("loss %.6f %s, %.6f %s", vGot, gotName, vWant, wantName)
	}
	for _, k := range argnums {
		for i := range gWant[k] {
			if d := math.Abs(gGot[k][i] - gWant[k][i]); d > gradTol*math.Max(1, math.Abs(gWant[k][i])) {
				t.Fatalf("%s[%d]: gradient %.7f %s, %.7f %s", m.Specs[k].Name, i, gGot[k][i], gotName, gWant[k][i], wantName)
			}
		}
	}
}
