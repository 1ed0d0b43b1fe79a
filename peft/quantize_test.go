package peft

import (
	"math"
	"testing"

	"github.com/posttrainllm/posttrainllm/internal/mlxtest"
	"github.com/posttrainllm/posttrainllm/mlx"
	"github.com/posttrainllm/posttrainllm/model"
)

// QuantizeBase holds the token embedding quantized, and its Linear looks
// up exactly the dequantized table's rows (gathered packed, then
// dequantized), with the tied head's x·Wᵀ and the chunked loss's g·W
// equal to the dequantized table's products to float32 rounding.
func TestQuantizedEmbeddingLinear(t *testing.T) {
	m := quantModel(t)
	mlxtest.Run(t, func(t testing.TB) {
		base := mustInit(t, m)
		q, frozen, err := QuantizeBase(m.Specs, base, 32, 4)
		if err != nil {
			t.Fatal(err)
		}
		if m.Specs[0].Name != model.TokenEmbeddingName || q.Indices[0] != 0 {
			t.Fatalf("quantized slots %v, want the token embedding (0) first", q.Indices)
		}
		if frozen[0].Dtype() != mlx.Uint32 {
			t.Fatalf("the frozen embedding is %v, want packed uint32", frozen[0].Dtype())
		}
		lin, err := q.Linears(frozen)
		if err != nil {
			t.Fatal(err)
		}
		l := lin[0]
		if l.Rows == nil || l.Apply == nil || l.ApplyT == nil {
			t.Fatal("the embedding's Linear lacks Rows, Apply or ApplyT")
		}
		table := q.Dequantize(frozen)[0] // [V, D]
		ids := mlx.FromSlice([]int32{3, 0, 60, 3, 17}, 5)
		got, want := floats(t, l.Rows(ids, l.Arrays)), floats(t, mlx.Take(table, ids, 0))
		for e := range want {
			if got[e] != want[e] {
				t.Fatalf("row element %d = %g, the dequantized table's %g", e, got[e], want[e])
			}
		}
		x := mlx.RandomNormal([]int{5, table.Dim(1)}, mlx.Float32, 0, 1, mlx.RandomKey(1))
		g := mlx.RandomNormal([]int{5, table.Dim(0)}, mlx.Float32, 0, 1, mlx.RandomKey(2))
		close := func(what string, got, want *mlx.Array) {
			gf, wf := floats(t, got), floats(t, want)
			if len(gf) != len(wf) {
				t.Fatalf("%s: %d values, want %d", what, len(gf), len(wf))
			}
			for e := range wf {
				if math.Abs(float64(gf[e]-wf[e])) > 1e-4*(1+math.Abs(float64(wf[e]))) {
					t.Fatalf("%s[%d] = %g, the dequantized table's %g", what, e, gf[e], wf[e])
				}
			}
		}
		close("x·Wᵀ", l.Apply(x, l.Arrays), mlx.Matmul(x, mlx.Transpose(table)))
		close("g·W", l.ApplyT(g, l.Arrays), mlx.Matmul(g, table))
	})
}
