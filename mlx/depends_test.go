package mlx

import (
	"strings"
	"testing"
)

// Depends returns its inputs' values, and the dependencies' operations
// join the graph of the results: evaluating them computes the dependencies.
func TestDependsKeepsValuesAndAddsTheEdge(t *testing.T) {
	onMLX(t, func() {
		a, b := f32([]float64{1, 2, 3}, 3), f32([]float64{4, 5}, 2)
		dep := Exp(f32([]float64{0.5}, 1))
		out := Depends([]*Array{Square(a), b}, []*Array{dep})
		if len(out) != 2 {
			t.Fatalf("Depends returned %d arrays for 2 inputs", len(out))
		}
		ops, err := GraphOps(out[0])
		if err != nil {
			t.Fatal(err)
		}
		if ops["Exp"] != 1 || ops["Square"] != 1 || ops["Depends"] != 1 {
			t.Fatalf("graph of the first result %v: want the dependency's Exp, the input's Square and one Depends", ops)
		}
		checkClose(t, "first", out[0], []int{3}, []float64{1, 4, 9}, 0)
		checkClose(t, "second", out[1], []int{2}, []float64{4, 5}, 0)
		if plain, err := GraphOps(Square(a)); err != nil || plain["Exp"] != 0 {
			t.Fatalf("graph without Depends %v (err %v): the Exp should come only through Depends", plain, err)
		}
	})
}

// Inside a compiled function Depends survives simplification and fusion
// (the dependency stays in the replayed graph), and the results are the
// inputs' values.
func TestDependsCompiled(t *testing.T) {
	onMLX(t, func() {
		fn := func(in []*Array) ([]*Array, error) {
			g := Sum(Square(in[1]))
			x := Depends([]*Array{MulScalar(in[0], 2)}, []*Array{g})[0]
			return []*Array{AddScalar(x, 1), g}, nil
		}
		c, err := Compile(fn)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Free()
		for round := 0; round < 2; round++ {
			out, err := c.Call(f32([]float64{1, -2}, 2), f32([]float64{3, 4}, 2))
			if err != nil {
				t.Fatal(err)
			}
			if ops, err := GraphOps(out[0]); err != nil || ops["Depends"] != 1 || ops["Square"] != 1 {
				t.Fatalf("compiled graph %v (err %v): want the Depends and its dependency's Square", ops, err)
			}
			checkClose(t, "compiled 2x+1", out[0], []int{2}, []float64{3, -3}, 0)
			checkClose(t, "compiled dependency", out[1], nil, []float64{25}, 0)
		}
	})
}

// Gradients flow through Depends to its inputs as if it were not there,
// and none flow into the dependencies.
func TestDependsGrad(t *testing.T) {
	onMLX(t, func() {
		fn := func(in []*Array) ([]*Array, error) {
			d := Depends([]*Array{Multiply(in[0], in[1])}, []*Array{Exp(in[1])})[0]
			return []*Array{Sum(Square(d))}, nil
		}
		w, x := f32(lcg(51, 6), 2, 3), f32(lcg(52, 6), 2, 3)
		checkGrad(t, "sum((w·x)²) through Depends", fn, []*Array{w, x}, []int{0, 1}, 1e-2, 2e-3)

		vg, err := ValueAndGrad(fn, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer vg.Free()
		_, g, err := vg.Call(w, x)
		if err != nil {
			t.Fatal(err)
		}
		wv, xv := values(t, w), values(t, x)
		want := make([]float64, len(wv))
		for i := range want {
			want[i] = 2 * wv[i] * xv[i] * xv[i]
		}
		checkClose(t, "d/dw", g[0], []int{2, 3}, want, 1e-5)
	})
}

// A carried error in an input or a dependency comes back in every result.
func TestDependsPropagatesErrors(t *testing.T) {
	onMLX(t, func() {
		bad := Matmul(f32(lcg(1, 6), 2, 3), f32(lcg(2, 6), 2, 3))
		ok := f32([]float64{1}, 1)
		for name, out := range map[string][]*Array{
			"bad dependency": Depends([]*Array{ok, ok}, []*Array{bad}),
			"bad input":      Depends([]*Array{bad, ok}, []*Array{ok}),
		} {
			if len(out) != 2 {
				t.Fatalf("%s: %d results for 2 inputs", name, len(out))
			}
			for _, a := range out {
				if err := a.Err(); err == nil || !strings.Contains(err.Error(), "matmul") {
					t.Fatalf("%s: result error %v, want the matmul's", name, err)
				}
			}
		}
	})
}
