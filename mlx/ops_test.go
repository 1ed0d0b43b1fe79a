package mlx

import (
	"slices"
	"strings"
	"testing"
)

func TestMatmul(t *testing.T) {
	onMLX(t, func() {
		// [2,3] @ [3,2]
		a := f32([]float64{1, 2, 3, 4, 5, 6}, 2, 3)
		b := f32([]float64{7, 8, 9, 10, 11, 12}, 3, 2)
		checkClose(t, "matmul", Matmul(a, b), []int{2, 2}, []float64{58, 64, 139, 154}, 1e-6)
		// Batched: [2,1,3] @ [3,2] broadcasts b over the batch.
		batch := f32([]float64{1, 0, 0, 0, 0, 1}, 2, 1, 3)
		checkClose(t, "batched matmul", Matmul(batch, b), []int{2, 1, 2}, []float64{7, 8, 11, 12}, 1e-6)
		// Matrix-vector.
		checkClose(t, "matvec", Matmul(a, f32([]float64{1, 1, 1})), []int{2}, []float64{6, 15}, 1e-6)
	})
}

func TestAddMM(t *testing.T) {
	onMLX(t, func() {
		a := f32([]float64{1, 2, 3, 4, 5, 6}, 2, 3)
		b := f32([]float64{7, 8, 9, 10, 11, 12}, 3, 2)
		c := f32([]float64{1, -1, 0.5, 2}, 2, 2)
		// 0.5·c + 2·(a@b), with a@b = [[58, 64], [139, 154]].
		checkClose(t, "addmm", AddMM(c, a, b, 2, 0.5), []int{2, 2}, []float64{116.5, 127.5, 278.25, 309}, 1e-5)
		// Batched a [2,1,3] with a [2,1,2] c, as a residual connection x + h@W uses it.
		batch := f32([]float64{1, 0, 0, 0, 0, 1}, 2, 1, 3)
		res := f32([]float64{1, 2, 3, 4}, 2, 1, 2)
		checkClose(t, "batched addmm", AddMM(res, batch, b, 1, 1), []int{2, 1, 2}, []float64{8, 10, 14, 16}, 1e-6)
		if err := AddMM(f32([]float64{1, 2, 3}, 3), a, b, 1, 1).Err(); err == nil || !strings.Contains(err.Error(), "addmm") {
			t.Fatalf("addmm with a [3] c against a [2,2] product: err = %v, want an addmm error", err)
		}
	})
}

func TestDivScalar(t *testing.T) {
	onMLX(t, func() {
		checkClose(t, "div scalar", DivScalar(f32([]float64{3, -6, 1.5}), 1.5), []int{3}, []float64{2, -4, 1}, 1e-7)
		if d := DivScalar(AsType(f32([]float64{1}), BFloat16), 2).Dtype(); d != BFloat16 {
			t.Fatalf("DivScalar of a bfloat16 array gave %v, want bfloat16", d)
		}
	})
}

func TestAsType(t *testing.T) {
	onMLX(t, func() {
		a := f32([]float64{-1.75, 0.5, 2.25, 300})
		i := AsType(a, Int32)
		if i.Dtype() != Int32 {
			t.Fatalf("astype int32 gave %v", i.Dtype())
		}
		checkInts(t, "astype int32 truncates", i, []int{4}, []int64{-1, 0, 2, 300})
		u := AsType(f32([]float64{0.5, 2.25, 200.9}), Uint8)
		checkInts(t, "astype uint8", u, []int{3}, []int64{0, 2, 200})
		back := AsType(i, Float32)
		checkClose(t, "int32 to float32", back, []int{4}, []float64{-1, 0, 2, 300}, 0)
		same := AsType(a, Float32)
		if same == a || same.Dtype() != Float32 {
			t.Fatalf("astype to the same dtype must return a new float32 array, got %v", same)
		}
		checkClose(t, "astype same dtype", same, []int{4}, []float64{-1.75, 0.5, 2.25, 300}, 0)
		h := AsType(a, Float16)
		checkClose(t, "astype float16", h, []int{4}, []float64{-1.75, 0.5, 2.25, 300}, 0)
		checkBools(t, "astype bool", AsType(f32([]float64{0, 2, -1}), Bool), []int{3}, []bool{false, true, true})
	})
}

func TestConstructors(t *testing.T) {
	onMLX(t, func() {
		checkClose(t, "arange", Arange(0, 5, 1, Float32), []int{5}, []float64{0, 1, 2, 3, 4}, 0)
		checkClose(t, "arange step", Arange(1, 2, 0.25, Float32), []int{4}, []float64{1, 1.25, 1.5, 1.75}, 0)
		ar := Arange(3, -3, -2, Int32)
		if ar.Dtype() != Int32 {
			t.Fatalf("arange int32 dtype %v", ar.Dtype())
		}
		checkInts(t, "arange negative step", ar, []int{3}, []int64{3, 1, -1})
		checkClose(t, "zeros", Zeros([]int{2, 3}, Float32), []int{2, 3}, make([]float64, 6), 0)
		checkClose(t, "ones", Ones([]int{3, 1}, Float32), []int{3, 1}, []float64{1, 1, 1}, 0)
		full := Full([]int{2, 2}, 2.5, BFloat16)
		if full.Dtype() != BFloat16 {
			t.Fatalf("full bf16 dtype %v", full.Dtype())
		}
		checkClose(t, "full", full, []int{2, 2}, []float64{2.5, 2.5, 2.5, 2.5}, 0)
		like := ZerosLike(AsType(f32([]float64{1, 2, 3, 4, 5, 6}, 3, 2), Int32))
		if like.Dtype() != Int32 {
			t.Fatalf("zeros_like dtype %v, want int32", like.Dtype())
		}
		checkInts(t, "zeros_like", like, []int{3, 2}, make([]int64, 6))
		s := Scalar(7, Int64)
		checkInts(t, "scalar", s, []int{}, []int64{7})
		if v, err := Scalar(-0.5, Float32).Item(); err != nil || v != -0.5 {
			t.Fatalf("Scalar(-0.5).Item() = %v, %v", v, err)
		}
	})
}

func TestTrilTriu(t *testing.T) {
	onMLX(t, func() {
		a := f32([]float64{1, 2, 3, 4, 5, 6, 7, 8, 9}, 3, 3)
		checkClose(t, "tril", Tril(a, 0), []int{3, 3}, []float64{1, 0, 0, 4, 5, 0, 7, 8, 9}, 0)
		checkClose(t, "tril -1", Tril(a, -1), []int{3, 3}, []float64{0, 0, 0, 4, 0, 0, 7, 8, 0}, 0)
		checkClose(t, "triu", Triu(a, 0), []int{3, 3}, []float64{1, 2, 3, 0, 5, 6, 0, 0, 9}, 0)
		checkClose(t, "triu 1", Triu(a, 1), []int{3, 3}, []float64{0, 2, 3, 0, 0, 6, 0, 0, 0}, 0)
	})
}

func TestTopK(t *testing.T) {
	onMLX(t, func() {
		a := f32([]float64{3, 1, 4, 1, 5, 9, 2, 6}, 2, 4)
		top := TopK(a, 2, -1)
		checkShape(t, "topk", top, 2, 2)
		got := values(t, top)
		for r, want := range [][]float64{{3, 4}, {6, 9}} {
			row := slices.Clone(got[2*r : 2*r+2])
			slices.Sort(row)
			if !slices.Equal(row, want) {
				t.Fatalf("topk row %d = %v, want %v in any order", r, row, want)
			}
		}
		col := TopK(a, 1, 0)
		checkClose(t, "topk axis0", col, []int{1, 4}, []float64{5, 9, 4, 6}, 0)
	})
}

func TestSortAndCumSum(t *testing.T) {
	onMLX(t, func() {
		a := f32([]float64{3, 1, 4, 1, 5, 9, 2, 6}, 2, 4)
		checkClose(t, "sort", Sort(a, -1), []int{2, 4}, []float64{1, 1, 3, 4, 2, 5, 6, 9}, 0)
		checkClose(t, "cumsum", CumSum(a, -1, false, true), []int{2, 4}, []float64{3, 4, 8, 9, 5, 14, 16, 22}, 0)
		checkClose(t, "cumsum exclusive", CumSum(a, -1, false, false), []int{2, 4}, []float64{0, 3, 4, 8, 0, 5, 14, 16}, 0)
		checkClose(t, "cumsum reverse", CumSum(a, 0, true, true), []int{2, 4}, []float64{8, 10, 6, 7, 5, 9, 2, 6}, 0)
	})
}

func TestStopGradient(t *testing.T) {
	onMLX(t, func() {
		x := f32([]float64{1, -2, 3})
		checkClose(t, "stop_gradient value", StopGradient(x), []int{3}, []float64{1, -2, 3}, 0)
		// d/dx sum(stop(x)^2 + 3x) = 3: nothing flows through stop(x).
		vg, err := ValueAndGrad(func(in []*Array) ([]*Array, error) {
			s := Square(StopGradient(in[0]))
			return []*Array{Sum(Add(s, MulScalar(in[0], 3)))}, nil
		}, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer vg.Free()
		vals, grads, err := vg.Call(x)
		if err != nil {
			t.Fatal(err)
		}
		checkClose(t, "value", vals[0], []int{}, []float64{14 + 6}, 1e-6)
		checkClose(t, "grad through stop_gradient", grads[0], []int{3}, []float64{3, 3, 3}, 0)
		// d/dx sum(x * stop(x)) = stop(x) = x, not 2x.
		vg2, err := ValueAndGrad(func(in []*Array) ([]*Array, error) {
			return []*Array{Sum(Multiply(in[0], StopGradient(in[0])))}, nil
		}, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer vg2.Free()
		_, grads, err = vg2.Call(x)
		if err != nil {
			t.Fatal(err)
		}
		checkClose(t, "grad of x*stop(x)", grads[0], []int{3}, []float64{1, -2, 3}, 0)
		// Only a stopped path: the gradient is exactly zero.
		vg3, err := ValueAndGrad(func(in []*Array) ([]*Array, error) {
			return []*Array{Sum(Exp(StopGradient(in[0])))}, nil
		}, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer vg3.Free()
		_, grads, err = vg3.Call(x)
		if err != nil {
			t.Fatal(err)
		}
		checkClose(t, "grad of stopped path", grads[0], []int{3}, []float64{0, 0, 0}, 0)
	})
}

func TestEmptyAndIntArrays(t *testing.T) {
	onMLX(t, func() {
		e := FromSlice([]float32{}, 0, 3)
		checkShape(t, "empty", e, 0, 3)
		if v, err := e.Float32s(); err != nil || len(v) != 0 {
			t.Fatalf("empty array read as %v, %v", v, err)
		}
		if b, err := e.Bytes(); err != nil || len(b) != 0 {
			t.Fatalf("empty array bytes %v, %v", b, err)
		}
		checkClose(t, "sum of empty", Sum(e, 0), []int{3}, []float64{0, 0, 0}, 0)
		// Integer data keeps its dtype and exact values.
		big := FromSlice([]int64{1 << 40, -3}, 2)
		if big.Dtype() != Int64 {
			t.Fatalf("int64 data gave %v", big.Dtype())
		}
		checkInts(t, "int64", big, []int{2}, []int64{1 << 40, -3})
		u := FromSlice([]uint8{0, 255})
		checkInts(t, "uint8", u, []int{2}, []int64{0, 255})
		if s := FromSlice([]float64{1.5}); s.Dtype() != Float32 {
			t.Fatalf("float64 data gave %v, want float32", s.Dtype())
		}
	})
}
