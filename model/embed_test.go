package model

import (
	"math"
	"testing"

	"github.com/posttrainllm/posttrainllm/internal/mlxtest"
	"github.com/posttrainllm/posttrainllm/mlx"
)

// bf16 rounds x to bfloat16 (round to nearest even), as MLX casts.
func bf16(x float64) float64 {
	b := math.Float32bits(float32(x))
	b += 0x7fff + (b>>16)&1
	return float64(math.Float32frombits(b &^ 0xffff))
}

// TestFloat32GatherAddsTheEmbeddingGradientInFloat32 gathers one bfloat16
// row for 2,048 positions, as real text repeats its frequent tokens, and
// differentiates Σ rows·c: the row's gradient is Σ c over the positions.
// With float32Gather it is that sum rounded to bfloat16 once; added up in
// bfloat16 one position at a time, as a bfloat16 scatter-add does, it
// stalls far from it (checked on the same numbers below, so the tolerance
// tells the two apart). The GPU formulation uses float32Gather.
func TestFloat32GatherAddsTheEmbeddingGradientInFloat32(t *testing.T) {
	if !formulationFor(mlx.GPU, Config{}).float32Gather {
		t.Fatal("the GPU formulation does not gather the embeddings through float32")
	}
	mlxtest.Run(t, checkFloat32Gather)
}

// checkFloat32Gather is TestFloat32GatherAddsTheEmbeddingGradientInFloat32
// on the default device (gpu_test.go runs it on the GPU).
func checkFloat32Gather(t testing.TB) {
	const vocab, dim, n, hot = 7, 4, 2048, 3
	ids := make([]int32, n)
	for i := range ids {
		ids[i] = hot
		if i%64 == 0 {
			ids[i] = int32(i/64) % vocab // a few other rows too
		}
	}
	cot := make([]float32, n*dim)
	for i := range cot {
		cot[i] = float32(bf16(1 + 0.25*math.Sin(float64(i))))
	}
	tableVals := make([]float32, vocab*dim)
	for i := range tableVals {
		tableVals[i] = float32(i) / 8
	}
	table := mlx.AsType(mlx.FromSlice(tableVals, vocab, dim), mlx.BFloat16)
	idsArr := mlx.FromSlice(ids, n)
	c := mlx.AsType(mlx.FromSlice(cot, n, dim), mlx.BFloat16)
	defer mlx.Free(table, idsArr, c)

	f := formulation{float32Gather: true}
	vg, err := mlx.ValueAndGrad(func(in []*mlx.Array) ([]*mlx.Array, error) {
		rows := f.embed(in[0], idsArr, true)
		if rows.Dtype() != mlx.BFloat16 {
			t.Errorf("gathered rows are %v, want the table's bfloat16", rows.Dtype())
		}
		return []*mlx.Array{mlx.Sum(mlx.AsType(mlx.Multiply(rows, c), mlx.Float32))}, nil
	}, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer vg.Free()
	vals, grads, err := vg.Call(table)
	if err != nil {
		t.Fatal(err)
	}
	defer mlx.Free(append(vals, grads...)...)
	if grads[0].Dtype() != mlx.BFloat16 {
		t.Fatalf("table gradient is %v, want bfloat16", grads[0].Dtype())
	}
	got := values(t, grads[0])

	want := make([]float64, vocab*dim)
	stalled := make([]float64, vocab*dim) // Σ in bfloat16, one position at a time
	for i, id := range ids {
		for d := range dim {
			k := int(id)*dim + d
			want[k] += float64(cot[i*dim+d])
			stalled[k] = bf16(stalled[k] + float64(cot[i*dim+d]))
		}
	}
	for k := range want {
		tol := math.Abs(bf16(want[k])-want[k]) + math.Abs(want[k])*1e-6
		if d := math.Abs(got[k] - want[k]); d > tol {
			t.Fatalf("d/d table[%d][%d] = %g, want the float64 sum %g rounded once (within %g)", k/dim, k%dim, got[k], want[k], tol)
		}
	}
	hotCol := hot * dim
	if d, tol := math.Abs(stalled[hotCol]-want[hotCol]), math.Abs(bf16(want[hotCol])-want[hotCol]); d <= 4*tol {
		t.Fatalf("test data too easy: summed in bfloat16 the hot row's gradient is off by %g only (rounding once: %g)", d, tol)
	}
}

// TestEmbedSkipsTheCastsWhereNoGradientIsTaken: generation with a KV cache
// gathers from the table as it is, and a float32 table needs no cast.
func TestEmbedSkipsTheCastsWhereNoGradientIsTaken(t *testing.T) {
	mlxtest.Run(t, func(t testing.TB) {
		table := mlx.AsType(mlx.FromSlice([]float32{1, 2, 3, 4, 5, 6}, 3, 2), mlx.BFloat16)
		ids := mlx.FromSlice([]int32{2, 0}, 2)
		defer mlx.Free(table, ids)
		if err := mlx.Eval(table, ids); err != nil { // counted below: only what embed adds
			t.Fatal(err)
		}
		f := formulation{float32Gather: true}
		for _, tc := range []struct {
			name           string
			table          *mlx.Array
			differentiable bool
			wantOps        map[string]int
		}{
			{"bfloat16, differentiable", table, true, map[string]int{"AsType": 2}},
			{"bfloat16, generation", table, false, map[string]int{"AsType": 0}},
			{"float32, differentiable", mlx.AsType(table, mlx.Float32), true, map[string]int{"AsType": 1}}, // the test's own cast
		} {
			rows := f.embed(tc.table, ids, tc.differentiable)
			ops, err := mlx.GraphOps(rows)
			if err != nil {
				t.Fatal(err)
			}
			for op, want := range tc.wantOps {
				if ops[op] != want {
					t.Errorf("%s: %d %s operations in %v, want %d", tc.name, ops[op], op, ops, want)
				}
			}
			if got, want := values(t, rows), []float64{5, 6, 1, 2}; len(got) != 4 || got[0] != want[0] || got[3] != want[3] {
				t.Errorf("%s: rows %v, want %v", tc.name, got, want)
			}
		}
	})
}
