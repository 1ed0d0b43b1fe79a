package mlx

import (
	"errors"
	"strings"
	"testing"
)

// xSinX is x·sin(x) elementwise with its exact derivative as a custom VJP.
func xSinX(t *testing.T) *Closure {
	t.Helper()
	c, err := CustomVJP(func(in []*Array) ([]*Array, error) {
		return []*Array{Multiply(in[0], Sin(in[0]))}, nil
	}, func(primals, cotangents, outputs []*Array) ([]*Array, error) {
		x := primals[0]
		d := Add(Sin(x), Multiply(x, Cos(x)))
		return []*Array{Multiply(cotangents[0], d)}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Free)
	return c
}

// sumOf is the loss sum(f(x)) of a one-input closure.
func sumOf(f *Closure) Func {
	return func(in []*Array) ([]*Array, error) {
		out, err := f.Call(in[0])
		if err != nil {
			return nil, err
		}
		return []*Array{Sum(out[0])}, nil
	}
}

func TestCustomVJPGradient(t *testing.T) {
	onMLX(t, func() {
		f := xSinX(t)
		fn := func(in []*Array) ([]*Array, error) {
			out, err := f.Call(in[0])
			if err != nil {
				return nil, err
			}
			return []*Array{Sum(Multiply(in[1], out[0]))}, nil
		}
		x, c := f32(lcg(31, 6), 2, 3), f32(lcg(32, 6), 2, 3)
		checkGrad(t, "sum(c*x*sin(x)) via custom vjp", fn, []*Array{x, c}, []int{0}, 1e-2, 2e-3)
	})
}

// TestCustomVJPReplacesAutodiff gives x² a deliberately different gradient,
// 10·cotangent, and checks that it is the one differentiation uses, also
// inside a compiled function, while the value stays x².
func TestCustomVJPReplacesAutodiff(t *testing.T) {
	onMLX(t, func() {
		var gotPrimals, gotCot, gotOut int
		sq, err := CustomVJP(func(in []*Array) ([]*Array, error) {
			return []*Array{Square(in[0])}, nil
		}, func(primals, cotangents, outputs []*Array) ([]*Array, error) {
			gotPrimals, gotCot, gotOut = len(primals), len(cotangents), len(outputs)
			return []*Array{MulScalar(cotangents[0], 10)}, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		defer sq.Free()
		vg, err := ValueAndGrad(sumOf(sq), 0)
		if err != nil {
			t.Fatal(err)
		}
		defer vg.Free()
		step, err := Compile(func(in []*Array) ([]*Array, error) {
			v, g, err := vg.Call(in...)
			if err != nil {
				return nil, err
			}
			return append(v, g...), nil
		})
		if err != nil {
			t.Fatal(err)
		}
		defer step.Free()
		x := f32([]float64{1, -2, 3}, 3)
		for name, run := range map[string]func() ([]*Array, error){
			"interpreted": func() ([]*Array, error) { v, g, err := vg.Call(x); return append(v, g...), err },
			"compiled":    func() ([]*Array, error) { return step.Call(x) },
		} {
			out, err := run()
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			checkClose(t, name+" value", out[0], []int{}, []float64{14}, 1e-6)
			checkClose(t, name+" gradient", out[1], []int{3}, []float64{10, 10, 10}, 1e-6)
		}
		if gotPrimals != 1 || gotCot != 1 || gotOut != 1 {
			t.Fatalf("vjp saw %d primals, %d cotangents, %d outputs; want 1 each", gotPrimals, gotCot, gotOut)
		}
	})
}

// TestCustomVJPErrors checks that a failing, panicking or miscounting vjp
// surfaces as an error of the gradient call, and that MLX works afterwards.
func TestCustomVJPErrors(t *testing.T) {
	onMLX(t, func() {
		identity := func(in []*Array) ([]*Array, error) { return []*Array{MulScalar(in[0], 1)}, nil }
		cases := []struct {
			name string
			vjp  VJPFunc
			want string
		}{
			{"error", func(p, c, o []*Array) ([]*Array, error) { return nil, errors.New("vjp refused") }, "vjp refused"},
			{"panic", func(p, c, o []*Array) ([]*Array, error) { panic("vjp exploded") }, "vjp exploded"},
			{"count", func(p, c, o []*Array) ([]*Array, error) { return []*Array{c[0], c[0]}, nil }, "2 cotangents for 1 inputs"},
		}
		for _, tc := range cases {
			f, err := CustomVJP(identity, tc.vjp)
			if err != nil {
				t.Fatal(err)
			}
			vg, err := ValueAndGrad(sumOf(f), 0)
			if err != nil {
				t.Fatal(err)
			}
			_, _, err = vg.Call(f32([]float64{1, 2}, 2))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s: err = %v, want one containing %q", tc.name, err, tc.want)
			}
			vg.Free()
			f.Free()
		}
		checkClose(t, "after the failures", Add(f32([]float64{1}, 1), f32([]float64{2}, 1)), []int{1}, []float64{3}, 0)
		if _, err := CustomVJP(nil, nil); err == nil {
			t.Fatal("CustomVJP(nil, nil) gave no error")
		}
	})
}
