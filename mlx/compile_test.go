package mlx

import (
	"strings"
	"sync/atomic"
	"testing"
)

// mlpBlock is a small graph with a matmul, fusable elementwise chains and a
// reduction: outputs tanh(x@w)·sigmoid(x@w) + 0.5·exp(-(x@w)²) and its sum.
func mlpBlock(in []*Array) ([]*Array, error) {
	h := Matmul(in[0], in[1])
	y := Add(Multiply(Tanh(h), Sigmoid(h)), MulScalar(Exp(Negative(Square(h))), 0.5))
	return []*Array{y, Sum(y, -1)}, nil
}

func TestCompileMatchesInterpreted(t *testing.T) {
	onMLX(t, func() {
		x, w := f32(lcg(30, 32), 4, 8), f32(lcg(31, 64), 8, 8)
		c, err := Compile(mlpBlock)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Free()
		got, err := c.Call(x, w)
		if err != nil {
			t.Fatal(err)
		}
		want, err := mlpBlock([]*Array{x, w})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 2 {
			t.Fatalf("compiled call returned %d outputs, want 2", len(got))
		}
		checkClose(t, "compiled y", got[0], []int{4, 8}, values(t, want[0]), 1e-5)
		checkClose(t, "compiled row sums", got[1], []int{4}, values(t, want[1]), 1e-5)
		shapeless, err := Compile(mlpBlock, Shapeless)
		if err != nil {
			t.Fatal(err)
		}
		defer shapeless.Free()
		got, err = shapeless.Call(x, w)
		if err != nil {
			t.Fatal(err)
		}
		checkClose(t, "shapeless y", got[0], []int{4, 8}, values(t, want[0]), 1e-5)
	})
}

// countingAffine returns a Func computing 2x+1 that counts its traces.
func countingAffine(traces *atomic.Int32) Func {
	return func(in []*Array) ([]*Array, error) {
		traces.Add(1)
		return []*Array{AddScalar(MulScalar(in[0], 2), 1)}, nil
	}
}

func TestCompileTracesOnce(t *testing.T) {
	onMLX(t, func() {
		var traces atomic.Int32
		c, err := Compile(countingAffine(&traces))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Free()
		for i := range 100 {
			s := NewScope()
			v := float64(i)
			out, err := c.Call(f32([]float64{v, -v, 0.5 * v}))
			if err != nil {
				t.Fatal(err)
			}
			checkClose(t, "compiled 2x+1", out[0], []int{3}, []float64{2*v + 1, -2*v + 1, v + 1}, 1e-6)
			s.Close()
		}
		if n := traces.Load(); n != 1 {
			t.Fatalf("100 calls with one input shape traced %d times, want 1", n)
		}
		// A new input shape is a new trace; the old one stays cached.
		if _, err := c.Call(f32([]float64{1, 2}, 2)); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Call(f32([]float64{1, 2, 3})); err != nil {
			t.Fatal(err)
		}
		if n := traces.Load(); n != 2 {
			t.Fatalf("after a second shape: %d traces, want 2", n)
		}
		// A shapeless compile reuses its trace for every shape.
		var shapeless atomic.Int32
		cs, err := Compile(countingAffine(&shapeless), Shapeless)
		if err != nil {
			t.Fatal(err)
		}
		defer cs.Free()
		for n := 1; n <= 4; n++ {
			out, err := cs.Call(Ones([]int{n}, Float32))
			if err != nil {
				t.Fatal(err)
			}
			checkClose(t, "shapeless 2x+1", out[0], []int{n}, mapf(make([]float64, n), func(float64) float64 { return 3 }), 0)
		}
		if n := shapeless.Load(); n != 1 {
			t.Fatalf("shapeless compile traced %d times for 4 shapes, want 1", n)
		}
	})
}

func TestSetCompileEnabled(t *testing.T) {
	onMLX(t, func() {
		var before, off atomic.Int32
		compiled, err := Compile(countingAffine(&before))
		if err != nil {
			t.Fatal(err)
		}
		defer compiled.Free()
		if err := SetCompileEnabled(false); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { SetCompileEnabled(true) })
		plain, err := Compile(countingAffine(&off))
		if err != nil {
			t.Fatal(err)
		}
		defer plain.Free()
		x := FromSlice([]float32{1, 2})
		for range 3 {
			for _, c := range []*Closure{compiled, plain} {
				out, err := c.Call(x)
				if err != nil {
					t.Fatal(err)
				}
				checkClose(t, "2x+1", out[0], []int{2}, []float64{3, 5}, 0)
			}
		}
		if err := SetCompileEnabled(true); err != nil {
			t.Fatal(err)
		}
		if _, err := plain.Call(x); err != nil {
			t.Fatal(err)
		}
		if before.Load() != 1 || off.Load() != 4 {
			t.Fatalf("traces: %d for the closure compiled before disabling (want 1), %d for the one compiled while disabled (want 4)",
				before.Load(), off.Load())
		}
	})
}

// TestGraphOpsCountsFusion counts the operations behind a compiled and an
// uncompiled mlpBlock: the compiled graph fuses the elementwise ops into
// Compiled primitives, so it holds fewer operations; evaluated arrays have
// none left.
func TestGraphOpsCountsFusion(t *testing.T) {
	onMLX(t, func() {
		in := []*Array{f32(lcg(41, 12), 3, 4), f32(lcg(42, 16), 4, 4), f32(lcg(43, 4), 4)}
		total := func(m map[string]int) (n int) {
			for _, c := range m {
				n += c
			}
			return n
		}
		plain, err := mlpBlock(in)
		if err != nil {
			t.Fatal(err)
		}
		interpreted, err := GraphOps(plain...)
		if err != nil {
			t.Fatal(err)
		}
		if interpreted["Matmul"] != 1 || interpreted["Compiled"] != 0 {
			t.Fatalf("uncompiled ops %v: want one Matmul and no Compiled", interpreted)
		}
		c, err := Compile(mlpBlock)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Free()
		out, err := c.Call(in...)
		if err != nil {
			t.Fatal(err)
		}
		compiled, err := GraphOps(out...)
		if err != nil {
			t.Fatal(err)
		}
		if compiled["Matmul"] != 1 || total(compiled) >= total(interpreted) {
			t.Fatalf("compiled ops %v, uncompiled %v: want one Matmul and fewer ops", compiled, interpreted)
		}
		if err := Eval(out...); err != nil {
			t.Fatal(err)
		}
		if after, err := GraphOps(out...); err != nil || total(after) != 0 {
			t.Fatalf("after Eval: ops %v, err %v; want none", after, err)
		}
	})
}

func TestCompileRejectsUnknownOption(t *testing.T) {
	if c, err := Compile(mlpBlock, Shapeless, CompileOption(7)); err == nil || !strings.Contains(err.Error(), "option 7") {
		c.Free()
		t.Fatalf("Compile with option 7: error %v, want one naming the option", err)
	}
}
