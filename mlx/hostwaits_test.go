package mlx

import "testing"

// HostWaits counts each call that waits for arrays to be computed, and
// none for AsyncEval, which only schedules.
func TestHostWaitsCountsEvaluationsAndReads(t *testing.T) {
	err := Do(func() error {
		a := MulScalar(FromSlice([]float32{1, 2, 3}, 3), 2)
		s := Sum(a)
		defer Free(a, s)
		check := func(what string, before uint64, want uint64) {
			t.Helper()
			if got := HostWaits() - before; got != want {
				t.Errorf("%s: %d host waits, want %d", what, got, want)
			}
		}
		n := HostWaits()
		if err := AsyncEval(a); err != nil {
			t.Fatal(err)
		}
		check("AsyncEval", n, 0)
		n = HostWaits()
		if err := Eval(a, s); err != nil {
			t.Fatal(err)
		}
		check("Eval of two arrays", n, 1)
		n = HostWaits()
		if v, err := s.Item(); err != nil || v != 12 {
			t.Fatalf("Item = %v, %v; want 12", v, err)
		}
		check("Item", n, 1)
		n = HostWaits()
		if _, err := a.Bytes(); err != nil {
			t.Fatal(err)
		}
		if _, err := a.Float32s(); err != nil {
			t.Fatal(err)
		}
		check("Bytes and Float32s", n, 2)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
