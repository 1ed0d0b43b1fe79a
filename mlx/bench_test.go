package mlx

// Benchmarks of the bridge's fixed costs on inputs small enough that MLX's
// compute is negligible. docs/performance/README.md records their numbers.

import (
	"testing"
)

// onThread runs a benchmark's body on the MLX thread, as a training step
// runs. Benchmarks free their arrays explicitly rather than through a
// Scope, whose bookkeeping would be timed.
func onThread(body func()) {
	_ = Do(func() error { body(); return nil })
}

// BenchmarkCgoRoundTrip is one Go→C++→Go call that does almost nothing: it
// asks MLX for the default device.
func BenchmarkCgoRoundTrip(b *testing.B) {
	onThread(func() {
		for b.Loop() {
			DefaultDevice()
		}
	})
}

// BenchmarkAddOp builds one lazy op (no evaluation) and frees it: two
// bridge calls, plus the Go Array and its cleanup registration.
func BenchmarkAddOp(b *testing.B) {
	onThread(func() {
		x, y := Ones([]int{16}, Float32), Ones([]int{16}, Float32)
		defer Free(x, y)
		b.ReportAllocs()
		for b.Loop() {
			Add(x, y).Free()
		}
	})
}

// BenchmarkAddOpHandedOver is BenchmarkAddOp called from a goroutine other
// than the MLX thread: both bridge calls are handed over, one at a time.
func BenchmarkAddOpHandedOver(b *testing.B) {
	x, y := Ones([]int{16}, Float32), Ones([]int{16}, Float32)
	defer Free(x, y)
	b.ReportAllocs()
	for b.Loop() {
		Add(x, y).Free()
	}
}

// BenchmarkDoHandoff is the fixed cost of handing work to the MLX thread
// from another goroutine: an empty Do.
func BenchmarkDoHandoff(b *testing.B) {
	for b.Loop() {
		_ = Do(func() error { return nil })
	}
}

// BenchmarkAddOpInScope is BenchmarkAddOp with a Scope open, as inside
// every traced function: each new array is also appended to the scope.
func BenchmarkAddOpInScope(b *testing.B) {
	onThread(func() {
		x, y := Ones([]int{16}, Float32), Ones([]int{16}, Float32)
		defer Free(x, y)
		s := NewScope()
		defer func() { s.Close() }()
		b.ReportAllocs()
		n := 0
		for b.Loop() {
			Add(x, y).Free()
			if n++; n%1024 == 0 { // bound the scope's list of arrays
				s.Close()
				s = NewScope()
			}
		}
	})
}

// BenchmarkAddScalarOp builds a+s without evaluation: the scalar array, the
// add, and freeing both.
func BenchmarkAddScalarOp(b *testing.B) {
	onThread(func() {
		x := Ones([]int{16}, Float32)
		defer Free(x)
		b.ReportAllocs()
		for b.Loop() {
			AddScalar(x, 1).Free()
		}
	})
}

// BenchmarkEvalSmall builds and evaluates one add of two [16] arrays.
func BenchmarkEvalSmall(b *testing.B) {
	onThread(func() {
		x, y := Ones([]int{16}, Float32), Ones([]int{16}, Float32)
		defer Free(x, y)
		b.ReportAllocs()
		for b.Loop() {
			z := Add(x, y)
			if err := Eval(z); err != nil {
				b.Fatal(err)
			}
			z.Free()
		}
	})
}

// chain20 applies 20 elementwise ops, (x+y, tanh, ·y, sigmoid) five times,
// to a [16] array: a graph whose cost is all per-op overhead.
func chain20(in []*Array) ([]*Array, error) {
	x, y := in[0], in[1]
	for range 5 {
		x = Sigmoid(Multiply(Tanh(Add(x, y)), y))
	}
	return []*Array{x}, nil
}

// BenchmarkInterpretedCall builds chain20's graph op by op and evaluates it.
func BenchmarkInterpretedCall(b *testing.B) {
	onThread(func() {
		x, y := Ones([]int{16}, Float32), Full([]int{16}, 0.5, Float32)
		defer Free(x, y)
		b.ReportAllocs()
		for b.Loop() {
			s := NewScope()
			out, _ := chain20([]*Array{x, y})
			if err := Eval(out...); err != nil {
				b.Fatal(err)
			}
			s.Close()
		}
	})
}

// BenchmarkCompiledCall runs chain20 compiled (traced once, fused) and
// evaluates the result, on the same inputs as BenchmarkInterpretedCall.
func BenchmarkCompiledCall(b *testing.B) {
	onThread(func() {
		x, y := Ones([]int{16}, Float32), Full([]int{16}, 0.5, Float32)
		defer Free(x, y)
		c, err := Compile(chain20)
		if err != nil {
			b.Fatal(err)
		}
		defer c.Free()
		warmUp(b, c, x, y)
		b.ReportAllocs()
		for b.Loop() {
			out, err := c.Call(x, y)
			if err != nil {
				b.Fatal(err)
			}
			if err := Eval(out...); err != nil {
				b.Fatal(err)
			}
			Free(out...)
		}
	})
}

// squareLossVG returns [16] inputs w and x and the value-and-grad of
// sum((w·x)²) with respect to w; they are freed when b ends.
func squareLossVG(b *testing.B) (w, x *Array, vg *ValueAndGradFunc) {
	w, x = Ones([]int{16}, Float32), Full([]int{16}, 0.5, Float32)
	vg, err := ValueAndGrad(func(in []*Array) ([]*Array, error) {
		return []*Array{Sum(Square(Multiply(in[0], in[1])))}, nil
	}, 0)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { vg.Free(); Free(w, x) })
	return w, x, vg
}

// BenchmarkValueAndGrad computes sum((w·x)²) and its gradient with respect
// to w for [16] arrays; MLX traces the Go function on every call.
func BenchmarkValueAndGrad(b *testing.B) {
	onThread(func() {
		w, x, vg := squareLossVG(b)
		b.ReportAllocs()
		for b.Loop() {
			vals, grads, err := vg.Call(w, x)
			if err != nil {
				b.Fatal(err)
			}
			if err := Eval(append(vals, grads...)...); err != nil {
				b.Fatal(err)
			}
			Free(vals...)
			Free(grads...)
		}
	})
}

// BenchmarkCompiledValueAndGrad is BenchmarkValueAndGrad with the
// value-and-grad call itself compiled, as the training step does.
func BenchmarkCompiledValueAndGrad(b *testing.B) {
	onThread(func() {
		w, x, vg := squareLossVG(b)
		c, err := Compile(func(in []*Array) ([]*Array, error) {
			vals, grads, err := vg.Call(in...)
			return append(vals, grads...), err
		})
		if err != nil {
			b.Fatal(err)
		}
		defer c.Free()
		warmUp(b, c, w, x)
		b.ReportAllocs()
		for b.Loop() {
			out, err := c.Call(w, x)
			if err != nil {
				b.Fatal(err)
			}
			if err := Eval(out...); err != nil {
				b.Fatal(err)
			}
			Free(out...)
		}
	})
}

// warmUp calls c once and evaluates the result, so the trace and the CPU
// backend's JIT compilation of fused kernels happen before the timing.
func warmUp(b *testing.B, c *Closure, inputs ...*Array) {
	out, err := c.Call(inputs...)
	if err != nil {
		b.Fatal(err)
	}
	if err := Eval(out...); err != nil {
		b.Fatal(err)
	}
	Free(out...)
}
