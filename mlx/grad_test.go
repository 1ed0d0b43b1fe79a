package mlx

import (
	"math"
	"testing"
)

// evalLoss calls fn directly (no transform) and returns its first output as
// a float64, freeing everything fn created.
func evalLoss(t *testing.T, fn Func, inputs []*Array) float64 {
	t.Helper()
	s := NewScope()
	defer s.Close()
	out, err := fn(inputs)
	if err != nil {
		t.Fatal(err)
	}
	v, err := out[0].Item()
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// checkGrad compares ValueAndGrad's gradients of fn's scalar first output
// with respect to the inputs at argnums against central finite differences
// of step h, computed from the float32 inputs actually fed to fn.
func checkGrad(t *testing.T, name string, fn Func, inputs []*Array, argnums []int, h, tol float64) {
	t.Helper()
	vg, err := ValueAndGrad(fn, argnums...)
	if err != nil {
		t.Fatal(err)
	}
	defer vg.Free()
	vals, grads, err := vg.Call(inputs...)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if len(grads) != len(argnums) {
		t.Fatalf("%s: %d gradients for %d argnums", name, len(grads), len(argnums))
	}
	v, err := vals[0].Item()
	if err != nil {
		t.Fatal(err)
	}
	if direct := evalLoss(t, fn, inputs); math.Abs(v-direct) > 1e-5*math.Max(1, math.Abs(direct)) {
		t.Fatalf("%s: value_and_grad value %g, direct call %g", name, v, direct)
	}
	for k, ai := range argnums {
		x := inputs[ai]
		checkShape(t, name+" grad", grads[k], x.Shape()...)
		g := values(t, grads[k])
		base := values(t, x)
		for j := range base {
			plus, minus := append([]float64(nil), base...), append([]float64(nil), base...)
			plus[j], minus[j] = base[j]+h, base[j]-h
			in := append([]*Array(nil), inputs...)
			in[ai] = f32(plus, x.Shape()...)
			fp := evalLoss(t, fn, in)
			in[ai] = f32(minus, x.Shape()...)
			fm := evalLoss(t, fn, in)
			step := float64(float32(plus[j])) - float64(float32(minus[j]))
			fd := (fp - fm) / step
			if math.Abs(g[j]-fd) > tol*math.Max(1, math.Abs(fd)) {
				t.Fatalf("%s: d/d input%d[%d] = %g, finite difference %g", name, ai, j, g[j], fd)
			}
		}
	}
}

func TestGradMatmulSumOfSquares(t *testing.T) {
	onMLX(t, func() {
		fn := func(in []*Array) ([]*Array, error) {
			return []*Array{Sum(Square(Matmul(in[1], in[0])))}, nil
		}
		w, x := f32(lcg(11, 12), 3, 4), f32(lcg(12, 6), 2, 3)
		checkGrad(t, "sum((x@w)^2)", fn, []*Array{w, x}, []int{0, 1}, 1e-2, 2e-3)
	})
}

func TestGradSoftmaxLog(t *testing.T) {
	onMLX(t, func() {
		// A weighted log-likelihood: sum(c * log(softmax(z))).
		fn := func(in []*Array) ([]*Array, error) {
			return []*Array{Sum(Multiply(in[1], Log(Softmax(in[0], -1))))}, nil
		}
		z, c := f32(lcg(13, 10), 2, 5), f32(lcg(14, 10), 2, 5)
		checkGrad(t, "sum(c*log(softmax(z)))", fn, []*Array{z, c}, []int{0}, 1e-2, 2e-3)
	})
}

func TestGradRMSNorm(t *testing.T) {
	onMLX(t, func() {
		fn := func(in []*Array) ([]*Array, error) {
			return []*Array{Sum(Multiply(in[2], RMSNorm(in[0], in[1], 1e-5)))}, nil
		}
		x, g, c := f32(lcg(15, 12), 2, 6), f32(lcg(16, 6), 6), f32(lcg(17, 12), 2, 6)
		checkGrad(t, "sum(c*rms_norm(x, g))", fn, []*Array{x, g, c}, []int{0, 1}, 1e-2, 2e-3)
	})
}

func TestGradAttention(t *testing.T) {
	onMLX(t, func() {
		const B, H, T, D = 1, 2, 4, 4
		fn := func(in []*Array) ([]*Array, error) {
			o := ScaledDotProductAttention(in[0], in[1], in[2], 0.5, CausalMask, nil)
			return []*Array{Sum(Multiply(in[3], o))}, nil
		}
		n := B * H * T * D
		in := []*Array{f32(lcg(18, n), B, H, T, D), f32(lcg(19, n), B, H, T, D), f32(lcg(20, n), B, H, T, D),
			f32(lcg(21, n), B, H, T, D)}
		checkGrad(t, "sum(c*sdpa(q,k,v))", fn, in, []int{0, 1, 2}, 1e-2, 2e-3)
	})
}

func TestGradAddMM(t *testing.T) {
	onMLX(t, func() {
		fn := func(in []*Array) ([]*Array, error) {
			return []*Array{Sum(Square(AddMM(in[0], in[1], in[2], 1.5, 0.5)))}, nil
		}
		c, a, b := f32(lcg(22, 8), 2, 4), f32(lcg(23, 6), 2, 3), f32(lcg(24, 12), 3, 4)
		checkGrad(t, "sum(addmm(c,a,b)^2)", fn, []*Array{c, a, b}, []int{0, 1, 2}, 1e-2, 2e-3)
	})
}

func TestValueAndGradTracesEveryCall(t *testing.T) {
	onMLX(t, func() {
		calls := 0
		vg, err := ValueAndGrad(func(in []*Array) ([]*Array, error) {
			calls++
			return []*Array{Sum(Square(in[0])), MulScalar(in[0], 3)}, nil
		}, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer vg.Free()
		for i := range 3 {
			v := float64(i + 1)
			vals, grads, err := vg.Call(f32([]float64{v, -v}))
			if err != nil {
				t.Fatal(err)
			}
			if len(vals) != 2 || len(grads) != 1 {
				t.Fatalf("%d values and %d gradients, want 2 and 1", len(vals), len(grads))
			}
			checkClose(t, "loss", vals[0], []int{}, []float64{2 * v * v}, 1e-6)
			checkClose(t, "auxiliary output", vals[1], []int{2}, []float64{3 * v, -3 * v}, 1e-6)
			checkClose(t, "gradient", grads[0], []int{2}, []float64{2 * v, -2 * v}, 1e-6)
		}
		// Unlike a compiled function, value_and_grad runs the Go function on
		// every call: wrap it in Compile to trace once.
		if calls != 3 {
			t.Fatalf("3 value_and_grad calls ran the function %d times, want 3", calls)
		}
	})
}
