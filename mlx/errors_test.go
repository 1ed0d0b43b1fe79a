package mlx

import (
	"errors"
	"strings"
	"testing"
)

func TestInvalidOpError(t *testing.T) {
	onMLX(t, func() {
		a, b := Ones([]int{2, 3}, Float32), Ones([]int{4, 5}, Float32)
		c := Matmul(a, b)
		err := c.Err()
		if err == nil {
			t.Fatal("matmul of [2,3] by [4,5] succeeded")
		}
		for _, want := range []string{"matmul", "[2,3]", "[4,5]"} {
			if !strings.Contains(err.Error(), want) {
				t.Fatalf("error %q does not mention %q", err, want)
			}
		}
		var me *Error
		if !errors.As(err, &me) || me.Op != "matmul" {
			t.Fatalf("error %v is not an *mlx.Error for op matmul", err)
		}
		if c.Valid() || c.Shape() != nil || c.Dtype() != -1 {
			t.Fatalf("failed array reports valid=%v shape=%v dtype=%v", c.Valid(), c.Shape(), c.Dtype())
		}
		// The error flows through every later operation to where values are read.
		d := Sum(Exp(AddScalar(Add(c, a), 1)), -1)
		if !errors.Is(d.Err(), err) {
			t.Fatalf("downstream error %v, want the matmul error", d.Err())
		}
		if e := Eval(a, d); !errors.Is(e, err) {
			t.Fatalf("Eval returned %v, want the matmul error", e)
		}
		if _, e := d.Float32s(); !errors.Is(e, err) {
			t.Fatalf("Float32s returned %v, want the matmul error", e)
		}
		if _, e := d.Item(); !errors.Is(e, err) {
			t.Fatalf("Item returned %v, want the matmul error", e)
		}
		if _, e := d.Bytes(); !errors.Is(e, err) {
			t.Fatalf("Bytes returned %v, want the matmul error", e)
		}
		if e := Concatenate([]*Array{a, c}, 0).Err(); !errors.Is(e, err) {
			t.Fatalf("concatenate returned %v, want the matmul error", e)
		}
		for _, p := range Split(c, 2, 0) {
			if !errors.Is(p.Err(), err) {
				t.Fatalf("split part carries %v, want the matmul error", p.Err())
			}
		}
		if e := Where(Less(c, a), a, a).Err(); !errors.Is(e, err) {
			t.Fatalf("where returned %v, want the matmul error", e)
		}
		if e := RMSNorm(c, nil, 1e-5).Err(); !errors.Is(e, err) {
			t.Fatalf("rms_norm returned %v, want the matmul error", e)
		}
		// The process is fine: a valid operation still works.
		checkClose(t, "after error", Matmul(a, Ones([]int{3, 1}, Float32)), []int{2, 1}, []float64{3, 3}, 0)
	})
}

func TestFreedAndNilArrays(t *testing.T) {
	onMLX(t, func() {
		a := Ones([]int{2}, Float32)
		a.Free()
		a.Free() // a second Free is a no-op
		if err := Add(a, a).Err(); err == nil || !strings.Contains(err.Error(), "freed") {
			t.Fatalf("op on a freed array gave %v, want a use-after-free error", err)
		}
		if _, err := a.Float32s(); err == nil {
			t.Fatal("reading a freed array succeeded")
		}
		var nilArr *Array
		if err := Exp(nilArr).Err(); err == nil || !strings.Contains(err.Error(), "nil") {
			t.Fatalf("op on a nil array gave %v", err)
		}
		if err := FromSlice([]float32{1, 2, 3}, 2, 2).Err(); err == nil {
			t.Fatal("FromSlice with 3 values for shape [2,2] succeeded")
		}
		if _, err := Ones([]int{2}, Float32).Item(); err == nil {
			t.Fatal("Item of a 2-element array succeeded")
		}
	})
}

func TestCompiledPanicBecomesError(t *testing.T) {
	onMLX(t, func() {
		fail := true
		c, err := Compile(func(in []*Array) ([]*Array, error) {
			if fail {
				var m map[string]int
				m["boom"]++ // a runtime panic: assignment to a nil map
			}
			return []*Array{Exp(in[0])}, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Free()
		x := Zeros([]int{2}, Float32)
		_, err = c.Call(x)
		if err == nil || !strings.Contains(err.Error(), "panic") || !strings.Contains(err.Error(), "nil map") {
			t.Fatalf("panicking traced function gave %v, want an error naming the panic", err)
		}
		// The failed trace left nothing behind: the next call traces afresh.
		fail = false
		out, err := c.Call(x)
		if err != nil {
			t.Fatalf("call after a panicking trace: %v", err)
		}
		checkClose(t, "after panic", out[0], []int{2}, []float64{1, 1}, 0)

		// Panics inside value_and_grad are caught the same way.
		vg, err := ValueAndGrad(func(in []*Array) ([]*Array, error) { panic("vag exploded") }, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer vg.Free()
		if _, _, err := vg.Call(x); err == nil || !strings.Contains(err.Error(), "vag exploded") {
			t.Fatalf("panicking value_and_grad function gave %v", err)
		}
	})
}

func TestTracedErrorSurfaces(t *testing.T) {
	onMLX(t, func() {
		c, err := Compile(func(in []*Array) ([]*Array, error) {
			if in[0].Dim(0) != 3 {
				return nil, errors.New("want 3 rows, got " + shapeString(in[0].Shape()))
			}
			return []*Array{in[0]}, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Free()
		_, err = c.Call(Zeros([]int{2}, Float32))
		if err == nil || !strings.Contains(err.Error(), "want 3 rows, got [2]") {
			t.Fatalf("Go error from the traced function surfaced as %v", err)
		}
		// An invalid op inside the trace surfaces with its name and shapes.
		bad, err := Compile(func(in []*Array) ([]*Array, error) {
			return []*Array{Matmul(in[0], in[0])}, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		defer bad.Free()
		_, err = bad.Call(Zeros([]int{2, 3}, Float32))
		if err == nil || !strings.Contains(err.Error(), "matmul") || !strings.Contains(err.Error(), "[2,3]") {
			t.Fatalf("invalid op inside a trace surfaced as %v", err)
		}
		// The same for value_and_grad, and for a non-scalar loss.
		vg, err := ValueAndGrad(func(in []*Array) ([]*Array, error) {
			return nil, errors.New("loss unavailable")
		}, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer vg.Free()
		if _, _, err := vg.Call(Zeros([]int{2}, Float32)); err == nil || !strings.Contains(err.Error(), "loss unavailable") {
			t.Fatalf("value_and_grad Go error surfaced as %v", err)
		}
		vec, err := ValueAndGrad(func(in []*Array) ([]*Array, error) { return []*Array{Exp(in[0])}, nil }, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer vec.Free()
		if _, _, err := vec.Call(Zeros([]int{2}, Float32)); err == nil {
			t.Fatal("value_and_grad of a non-scalar output succeeded")
		}
		if _, _, err := vec.Call(); err == nil {
			t.Fatal("value_and_grad with argnum 0 and no inputs succeeded")
		}
		// An input carrying an error stops the call before MLX runs.
		failed := Matmul(Zeros([]int{2, 3}, Float32), Zeros([]int{2, 3}, Float32))
		if _, err := c.Call(failed); !errors.Is(err, failed.Err()) {
			t.Fatalf("call with a failed input gave %v, want its error", err)
		}
		if _, err := ValueAndGrad(func([]*Array) ([]*Array, error) { return nil, nil }); err == nil {
			t.Fatal("value_and_grad without argnums succeeded")
		}
	})
}
