package mlx

import (
	"math"
	"testing"
)

func TestUnaryOps(t *testing.T) {
	onMLX(t, func() {
		in := []float64{-2, -0.5, 0, 0.25, 1, 3}
		pos := []float64{0.5, 1, 2, 4, 9, 16}
		x, p := f32(in), f32(pos)
		erf := func(v float64) float64 { return math.Erf(v) }
		sigmoid := func(v float64) float64 { return 1 / (1 + math.Exp(-v)) }
		sign := func(v float64) float64 {
			switch {
			case v > 0:
				return 1
			case v < 0:
				return -1
			}
			return 0
		}
		cases := []struct {
			name string
			got  *Array
			want []float64
		}{
			{"abs", Abs(x), mapf(in, math.Abs)},
			{"negative", Negative(x), mapf(in, func(v float64) float64 { return -v })},
			{"sign", Sign(x), mapf(in, sign)},
			{"square", Square(x), mapf(in, func(v float64) float64 { return v * v })},
			{"exp", Exp(x), mapf(in, math.Exp)},
			{"sin", Sin(x), mapf(in, math.Sin)},
			{"cos", Cos(x), mapf(in, math.Cos)},
			{"tanh", Tanh(x), mapf(in, math.Tanh)},
			{"sigmoid", Sigmoid(x), mapf(in, sigmoid)},
			{"erf", Erf(x), mapf(in, erf)},
			{"floor", Floor(x), mapf(in, math.Floor)},
			{"copy", Copy(x), in},
			{"sqrt", Sqrt(p), mapf(pos, math.Sqrt)},
			{"rsqrt", Rsqrt(p), mapf(pos, func(v float64) float64 { return 1 / math.Sqrt(v) })},
			{"log", Log(p), mapf(pos, math.Log)},
			{"log1p", Log1p(f32([]float64{1e-7, 0.5, 3})), []float64{1e-7, math.Log1p(0.5), math.Log1p(3)}},
			{"expm1", Expm1(x), mapf(in, math.Expm1)},
		}
		for _, c := range cases {
			checkClose(t, c.name, c.got, []int{c.got.Size()}, c.want, 1e-6)
		}
		// log1p keeps precision near zero where log(1+x) in float32 loses it.
		v := values(t, Log1p(f32([]float64{1e-7})))
		if math.Abs(v[0]-1e-7) > 1e-12 {
			t.Fatalf("log1p(1e-7) = %g, want 1e-7 to 5 digits", v[0])
		}
		if v := values(t, Expm1(f32([]float64{1e-7}))); math.Abs(v[0]-1e-7) > 1e-12 {
			t.Fatalf("expm1(1e-7) = %g, want 1e-7 to 5 digits", v[0])
		}
	})
}

func TestFloatClassification(t *testing.T) {
	onMLX(t, func() {
		x := FromSlice([]float32{1, float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1)), 0})
		checkBools(t, "isnan", IsNaN(x), []int{5}, []bool{false, true, false, false, false})
		checkBools(t, "isinf", IsInf(x), []int{5}, []bool{false, false, true, true, false})
		checkBools(t, "isfinite", IsFinite(x), []int{5}, []bool{true, false, false, false, true})
		b := FromSlice([]bool{true, false})
		checkBools(t, "logical_not", LogicalNot(b), []int{2}, []bool{false, true})
	})
}

func TestBinaryOpsBroadcast(t *testing.T) {
	onMLX(t, func() {
		// a is [2,3], b is [3]: b broadcasts along the rows.
		av := []float64{1, 2, 3, 4, 5, 6}
		bv := []float64{2, -1, 0.5}
		a, b := f32(av, 2, 3), f32(bv, 3)
		apply := func(f func(x, y float64) float64) []float64 {
			out := make([]float64, 6)
			for i := range out {
				out[i] = f(av[i], bv[i%3])
			}
			return out
		}
		cases := []struct {
			name string
			got  *Array
			want []float64
		}{
			{"add", Add(a, b), apply(func(x, y float64) float64 { return x + y })},
			{"subtract", Subtract(a, b), apply(func(x, y float64) float64 { return x - y })},
			{"multiply", Multiply(a, b), apply(func(x, y float64) float64 { return x * y })},
			{"divide", Divide(a, b), apply(func(x, y float64) float64 { return x / y })},
			{"power", Power(a, b), apply(math.Pow)},
			{"maximum", Maximum(a, b), apply(math.Max)},
			{"minimum", Minimum(a, b), apply(math.Min)},
			{"add_scalar", AddScalar(a, 1.5), mapf(av, func(x float64) float64 { return x + 1.5 })},
			{"mul_scalar", MulScalar(a, -2), mapf(av, func(x float64) float64 { return -2 * x })},
		}
		for _, c := range cases {
			checkClose(t, c.name, c.got, []int{2, 3}, c.want, 1e-6)
		}
		// A column [2,1] against a row [3] broadcasts to [2,3].
		col := f32([]float64{10, 20}, 2, 1)
		checkClose(t, "outer add", Add(col, b), []int{2, 3}, []float64{12, 9, 10.5, 22, 19, 20.5}, 1e-6)
		// Shapes that do not broadcast give an error naming both operands.
		bad := Add(a, f32([]float64{1, 2}, 2))
		if bad.Err() == nil {
			t.Fatal("add of [2,3] and [2] succeeded, want a broadcast error")
		}
	})
}

func TestScalarOpsKeepDtype(t *testing.T) {
	onMLX(t, func() {
		a := AsType(f32([]float64{1, 2}), BFloat16)
		for name, got := range map[string]*Array{"add_scalar": AddScalar(a, 0.5), "mul_scalar": MulScalar(a, 3)} {
			if got.Dtype() != BFloat16 {
				t.Fatalf("%s of bfloat16 gave %v, want bfloat16", name, got.Dtype())
			}
		}
		checkClose(t, "bf16 add", AddScalar(a, 0.5), []int{2}, []float64{1.5, 2.5}, 0)
	})
}

func TestComparisons(t *testing.T) {
	onMLX(t, func() {
		a := f32([]float64{1, 2, 3, 4}, 2, 2)
		b := f32([]float64{2, 2}, 2)
		cases := []struct {
			name string
			got  *Array
			want []bool
		}{
			{"equal", Equal(a, b), []bool{false, true, false, false}},
			{"not_equal", NotEqual(a, b), []bool{true, false, true, true}},
			{"less", Less(a, b), []bool{true, false, false, false}},
			{"less_equal", LessEqual(a, b), []bool{true, true, false, false}},
			{"greater", Greater(a, b), []bool{false, false, true, true}},
			{"greater_equal", GreaterEqual(a, b), []bool{false, true, true, true}},
		}
		for _, c := range cases {
			if c.got.Dtype() != Bool {
				t.Fatalf("%s gave dtype %v, want bool", c.name, c.got.Dtype())
			}
			checkBools(t, c.name, c.got, []int{2, 2}, c.want)
		}
		p := FromSlice([]bool{true, true, false, false})
		q := FromSlice([]bool{true, false, true, false})
		checkBools(t, "logical_and", LogicalAnd(p, q), []int{4}, []bool{true, false, false, false})
		checkBools(t, "logical_or", LogicalOr(p, q), []int{4}, []bool{true, true, true, false})
	})
}

func TestWhere(t *testing.T) {
	onMLX(t, func() {
		cond := FromSlice([]bool{true, false, false, true}, 2, 2)
		x := f32([]float64{1, 2, 3, 4}, 2, 2)
		// y is a scalar-like [1] array: it broadcasts.
		y := f32([]float64{-1}, 1)
		checkClose(t, "where", Where(cond, x, y), []int{2, 2}, []float64{1, -1, -1, 4}, 0)
		// A row condition broadcasts over the rows of x.
		row := FromSlice([]bool{false, true})
		checkClose(t, "where row", Where(row, x, y), []int{2, 2}, []float64{-1, 2, -1, 4}, 0)
	})
}
