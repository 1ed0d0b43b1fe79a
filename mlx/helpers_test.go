package mlx

import (
	"math"
	"testing"
)

// onMLX runs a test's body on the MLX thread, as a training step runs,
// inside a scope that frees every array the body creates. t.Fatal and
// t.Skip inside body end the test as usual: Do passes their Goexit on to the
// test's goroutine. body must not wait for goroutines that use MLX.
func onMLX(t testing.TB, body func()) {
	t.Helper()
	_ = Do(func() error {
		s := NewScope()
		defer s.Close()
		body()
		return nil
	})
}

// values evaluates a and returns its elements as float64, failing the test
// on any error.
func values(t testing.TB, a *Array) []float64 {
	t.Helper()
	f, err := a.Float32s()
	if err != nil {
		t.Fatalf("reading %v: %v", a, err)
	}
	out := make([]float64, len(f))
	for i, x := range f {
		out[i] = float64(x)
	}
	return out
}

// ints evaluates a and returns its elements as int64.
func ints(t testing.TB, a *Array) []int64 {
	t.Helper()
	v, err := ToSlice[int64](a)
	if err != nil {
		t.Fatalf("reading %v: %v", a, err)
	}
	return v
}

// bools evaluates a and returns its elements as bool.
func bools(t testing.TB, a *Array) []bool {
	t.Helper()
	v, err := ToSlice[bool](a)
	if err != nil {
		t.Fatalf("reading %v: %v", a, err)
	}
	return v
}

// checkShape fails the test unless a has the given shape.
func checkShape(t testing.TB, name string, a *Array, want ...int) {
	t.Helper()
	if err := a.Err(); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	got := a.Shape()
	if len(got) != len(want) {
		t.Fatalf("%s: shape %v, want %v", name, got, want)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("%s: shape %v, want %v", name, got, want)
		}
	}
}

// checkClose fails the test unless every element of a is within
// tol·max(1, |want|) of want and a has the given shape (nil: not checked).
func checkClose(t testing.TB, name string, a *Array, shape []int, want []float64, tol float64) {
	t.Helper()
	if shape != nil {
		checkShape(t, name, a, shape...)
	}
	got := values(t, a)
	closeSlices(t, name, got, want, tol)
}

// closeSlices compares two float slices elementwise with a relative
// tolerance that becomes absolute below magnitude 1.
func closeSlices(t testing.TB, name string, got, want []float64, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d: %v", name, len(got), len(want), got)
	}
	for i := range got {
		g, w := got[i], want[i]
		if math.IsNaN(w) {
			if !math.IsNaN(g) {
				t.Fatalf("%s[%d] = %v, want NaN (all: %v)", name, i, g, got)
			}
			continue
		}
		if math.IsInf(w, 0) {
			if g != w {
				t.Fatalf("%s[%d] = %v, want %v (all: %v)", name, i, g, w, got)
			}
			continue
		}
		if math.Abs(g-w) > tol*math.Max(1, math.Abs(w)) {
			t.Fatalf("%s[%d] = %v, want %v within %g (all: %v)", name, i, g, w, tol, got)
		}
	}
}

// checkInts fails the test unless a holds exactly want with the given shape.
func checkInts(t testing.TB, name string, a *Array, shape []int, want []int64) {
	t.Helper()
	if shape != nil {
		checkShape(t, name, a, shape...)
	}
	got := ints(t, a)
	if len(got) != len(want) {
		t.Fatalf("%s = %v, want %v", name, got, want)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("%s = %v, want %v", name, got, want)
		}
	}
}

// checkBools fails the test unless a holds exactly want.
func checkBools(t testing.TB, name string, a *Array, shape []int, want []bool) {
	t.Helper()
	if shape != nil {
		checkShape(t, name, a, shape...)
	}
	got := bools(t, a)
	if len(got) != len(want) {
		t.Fatalf("%s = %v, want %v", name, got, want)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("%s = %v, want %v", name, got, want)
		}
	}
}

// mapf applies f to each element of xs.
func mapf(xs []float64, f func(float64) float64) []float64 {
	out := make([]float64, len(xs))
	for i, x := range xs {
		out[i] = f(x)
	}
	return out
}

// f32 builds a float32 array from float64 values.
func f32(v []float64, shape ...int) *Array { return FromSlice(v, shape...) }

// lcg returns n deterministic pseudo-random values in [-1, 1), so test
// inputs need no MLX random state.
func lcg(seed uint64, n int) []float64 {
	out := make([]float64, n)
	s := seed*6364136223846793005 + 1442695040888963407
	for i := range out {
		s = s*6364136223846793005 + 1442695040888963407
		out[i] = float64(s>>11)/float64(1<<53)*2 - 1
	}
	return out
}
