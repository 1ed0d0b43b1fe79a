package mlx

import (
	"math"
	"testing"
)

func TestCompiledLoopMemoryFlat(t *testing.T) {
	onMLX(t, func() {
		step, err := Compile(func(in []*Array) ([]*Array, error) {
			// A contraction towards 1 keeps the values finite for 10 000 steps.
			return []*Array{AddScalar(MulScalar(Tanh(in[0]), 0.5), 0.5)}, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		defer step.Free()
		x := Zeros([]int{64, 64}, Float32)
		run := func(n int) {
			for range n {
				out, err := step.Call(x)
				if err != nil {
					t.Fatal(err)
				}
				if err := Eval(out[0]); err != nil {
					t.Fatal(err)
				}
				x.Free()
				x = out[0]
			}
		}
		run(100)
		warm := Memory().Active
		run(10_000)
		after := Memory().Active
		const slack = 64 << 10
		if after > warm+slack {
			t.Fatalf("active memory grew from %d to %d bytes over 10 000 compiled calls", warm, after)
		}
		// The loop converges to the fixed point of x = tanh(x)/2 + 1/2.
		fixed := 0.0
		for range 200 {
			fixed = math.Tanh(fixed)/2 + 0.5
		}
		checkClose(t, "fixed point", x, []int{64, 64}, mapf(make([]float64, 64*64), func(float64) float64 { return fixed }), 1e-6)
		x.Free()
	})
}

func TestScopeFreesUnkept(t *testing.T) {
	onMLX(t, func() {
		const n = 1 << 18 // 1 MiB of float32
		base := Memory().Active
		s := NewScope()
		a := Ones([]int{n}, Float32)
		b := MulScalar(a, 2)
		kept := AddScalar(b, 1)
		if err := Eval(a, b, kept); err != nil {
			t.Fatal(err)
		}
		if grown := Memory().Active - base; grown < 3*4*n {
			t.Fatalf("three 1 MiB arrays added only %d bytes of active memory", grown)
		}
		s.Keep(kept)
		s.Close()
		s.Close() // closing twice is a no-op
		if a.Valid() || b.Valid() {
			t.Fatal("arrays created in a closed scope are still valid")
		}
		if !kept.Valid() {
			t.Fatalf("kept array was freed: %v", kept.Err())
		}
		if grown := Memory().Active - base; grown > 4*n+(64<<10) {
			t.Fatalf("after the scope closed %d bytes above the baseline remain, want about one array (%d)", grown, 4*n)
		}
		if v := values(t, kept); v[0] != 3 || v[n-1] != 3 {
			t.Fatalf("kept array holds %v … %v, want 3", v[0], v[n-1])
		}
		kept.Free()
		if grown := int64(Memory().Active) - int64(base); grown > 64<<10 {
			t.Fatalf("after freeing the kept array %d bytes above the baseline remain", grown)
		}
	})
}

func TestNestedScopes(t *testing.T) {
	onMLX(t, func() {
		outer := NewScope()
		x := Ones([]int{4}, Float32)
		inner := NewScope()
		y := AddScalar(x, 1)
		z := AddScalar(y, 1)
		tmp := Exp(z)
		inner.Keep(z)
		inner.Close()
		if tmp.Valid() || y.Valid() {
			t.Fatal("inner scope did not free its unkept arrays")
		}
		if !x.Valid() || !z.Valid() {
			t.Fatal("inner scope freed an outer or kept array")
		}
		// z moved to the outer scope: it is freed when the outer scope closes.
		checkClose(t, "z", z, []int{4}, []float64{3, 3, 3, 3}, 0)
		outer.Close()
		if x.Valid() || z.Valid() {
			t.Fatal("outer scope did not free its arrays, including the one kept from the inner scope")
		}

		// Run keeps exactly what its function returns.
		var inside *Array
		out := Run(func() []*Array {
			inside = Ones([]int{2}, Float32)
			return []*Array{MulScalar(inside, 5)}
		})
		if inside.Valid() {
			t.Fatal("Run did not free an intermediate array")
		}
		checkClose(t, "Run result", out[0], []int{2}, []float64{5, 5}, 0)
	})
}

func TestMemoryStats(t *testing.T) {
	onMLX(t, func() {
		ResetPeakMemory()
		base := Memory()
		if base.Peak != 0 {
			t.Fatalf("after ResetPeakMemory peak is %d, want 0", base.Peak)
		}
		const n = 1 << 18
		a := Ones([]int{n}, Float32)
		if err := AsyncEval(a); err != nil {
			t.Fatal(err)
		}
		if err := Eval(a); err != nil {
			t.Fatal(err)
		}
		m := Memory()
		if m.Active < base.Active+4*n || m.Peak < m.Active {
			t.Fatalf("after a 1 MiB array: %+v (before %+v)", m, base)
		}
		a.Free()
		freed := Memory()
		if freed.Active > m.Active-4*n+(64<<10) {
			t.Fatalf("freeing a 1 MiB array left active at %d (was %d)", freed.Active, m.Active)
		}
		if freed.Peak < m.Active {
			t.Fatalf("peak %d fell below the earlier active %d", freed.Peak, m.Active)
		}
		ClearCache()
		if c := Memory().Cache; c != 0 {
			t.Fatalf("cache holds %d bytes after ClearCache", c)
		}
		prev := SetCacheLimit(1 << 20)
		if got := SetCacheLimit(prev); got != 1<<20 {
			t.Fatalf("SetCacheLimit returned %d, want the 1 MiB just set", got)
		}
		prevLimit := SetMemoryLimit(1 << 30)
		if got := MemoryLimit(); got != 1<<30 {
			t.Fatalf("MemoryLimit is %d after SetMemoryLimit(1 GiB)", got)
		}
		if got := SetMemoryLimit(prevLimit); got != 1<<30 {
			t.Fatalf("SetMemoryLimit returned %d, want the 1 GiB just set", got)
		}
	})
}
