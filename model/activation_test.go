package model

import (
	"encoding/json"
	"math"
	"strings"
	"testing"

	"github.com/posttrainllm/posttrainllm/internal/mlxtest"
	"github.com/posttrainllm/posttrainllm/mlx"
)

// TestGELUValuesAndDerivatives checks both GELUs, plain and with the
// written-out derivative, against float64 formulas: values, and the
// gradient of sum(GELU(x)) against a central difference of the formula.
func TestGELUValuesAndDerivatives(t *testing.T) {
	exact := func(x float64) float64 { return 0.5 * x * (1 + math.Erf(x/math.Sqrt2)) }
	approx := func(x float64) float64 {
		return 0.5 * x * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(x+0.044715*x*x*x)))
	}
	xs := make([]float32, 0, 81)
	for i := -40; i <= 40; i++ {
		xs = append(xs, float32(i)/8)
	}
	mlxtest.Run(t, func(t testing.TB) {
		for _, kind := range []struct {
			name string
			f    func(float64) float64
		}{{GELUExact, exact}, {GELUTanh, approx}} {
			for _, written := range []bool{false, true} {
				g, err := newGELU(kind.name, written)
				if err != nil {
					t.Fatal(err)
				}
				vg, err := mlx.ValueAndGrad(func(in []*mlx.Array) ([]*mlx.Array, error) {
					return []*mlx.Array{mlx.Sum(g.apply(in[0]))}, nil
				}, 0)
				if err != nil {
					t.Fatal(err)
				}
				x := mlx.FromSlice(xs, len(xs))
				y := values(t, g.apply(x))
				_, grads, err := vg.Call(x)
				if err != nil {
					t.Fatal(err)
				}
				dy := values(t, grads[0])
				vg.Free()
				g.Free()
				for i, xf := range xs {
					v := float64(xf)
					if want := kind.f(v); math.Abs(y[i]-want) > 1e-6*math.Max(1, math.Abs(want)) {
						t.Fatalf("%s gelu (written derivative %v) of %g = %.8g, want %.8g", kind.name, written, v, y[i], want)
					}
					const h = 1e-5
					if want := (kind.f(v+h) - kind.f(v-h)) / (2 * h); math.Abs(dy[i]-want) > 1e-5 {
						t.Fatalf("%s gelu (written derivative %v): derivative at %g = %.8g, want %.8g", kind.name, written, v, dy[i], want)
					}
				}
			}
		}
	})
}

// TestGELUTanhIsCloseToExact bounds how far GPT-2's approximation moves the
// activation: by at most 5e-4 anywhere, so switching a model between the
// two changes its function only slightly, but measurably.
func TestGELUTanhIsCloseToExact(t *testing.T) {
	mlxtest.Run(t, func(t testing.TB) {
		xs := make([]float32, 0, 1601)
		for i := -800; i <= 800; i++ {
			xs = append(xs, float32(i)/100)
		}
		x := mlx.FromSlice(xs, len(xs))
		e, _ := newGELU(GELUExact, false)
		a, _ := newGELU(GELUTanh, false)
		d := values(t, mlx.Max(mlx.Abs(mlx.Subtract(e.apply(x), a.apply(x)))))[0]
		if d > 5e-4 || d < 1e-4 {
			t.Fatalf("max |gelu_tanh − gelu_exact| over [−8, 8] = %.3g, want between 1e-4 and 5e-4 (about 4.7e-4)", d)
		}
	})
}

func TestGELUConfig(t *testing.T) {
	c := smallConfig()
	if got := c.WithDefaults().GELU; got != GELUExact {
		t.Fatalf("default gelu %q, want %q", got, GELUExact)
	}
	// A config stored before the field existed reads as the exact GELU.
	var old Config
	if err := json.Unmarshal([]byte(`{"vocab_size": 61, "d_model": 32, "layers": 2, "heads": 4, "context": 16}`), &old); err != nil {
		t.Fatal(err)
	}
	m, err := New(old)
	if err != nil || m.Config.GELU != GELUExact {
		t.Fatalf("config without gelu: New gives gelu %q (%v), want %q", m.Config.GELU, err, GELUExact)
	}
	c.GELU = "relu"
	_, err = New(c)
	if err == nil || !strings.Contains(err.Error(), `"relu"`) || !strings.Contains(err.Error(), `"tanh"`) {
		t.Fatalf("gelu relu: want an error naming the value and the choices, got %v", err)
	}
	c.GELU = GELUTanh
	if _, err := New(c); err != nil {
		t.Fatalf("gelu tanh rejected: %v", err)
	}
	b, err := json.Marshal(c)
	if err != nil || !strings.Contains(string(b), `"gelu":"tanh"`) {
		t.Fatalf("config JSON %s (%v), want it to store \"gelu\":\"tanh\"", b, err)
	}
}
