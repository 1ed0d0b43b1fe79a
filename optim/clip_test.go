package optim

import (
	"math"
	"testing"

	"github.com/posttrainllm/posttrainllm/mlx"
)

func TestClipByGlobalNorm(t *testing.T) {
	onMLX(t, func() {
		params := fixtureParams()
		data := make([][]float64, len(params))
		sumSq := 0.0
		for i, p := range params {
			data[i] = gradValue(1, i, p)
			for _, v := range data[i] {
				sumSq += v * v
			}
		}
		want := math.Sqrt(sumSq)
		grads := gradArrays(t, params, 1, mlx.Float32)

		globalNorm := func(arrs []*mlx.Array) float64 {
			s := 0.0
			for _, a := range arrs {
				for _, v := range readData(t, a) {
					s += v * v
				}
			}
			return math.Sqrt(s)
		}

		for _, maxNorm := range []float64{0, -1, 2 * want, want / 3} {
			clipped, norm := ClipByGlobalNorm(grads, maxNorm)
			if norm.Ndim() != 0 || norm.Dtype() != mlx.Float32 {
				t.Fatalf("maxNorm %g: norm is %s, want a 0-D float32", maxNorm, norm)
			}
			if got := readData(t, norm)[0]; math.Abs(got-want) > 1e-5*want {
				t.Fatalf("maxNorm %g: norm = %.8g, want %.8g", maxNorm, got, want)
			}
			scale := 1.0
			if maxNorm > 0 && maxNorm < want {
				scale = maxNorm / (want + 1e-6)
			}
			for i, p := range params {
				exp := make([]float64, len(data[i]))
				for k, v := range data[i] {
					exp[k] = v * scale
				}
				assertClose(t, "clipped "+p.Name, readData(t, clipped[i]), exp, 1e-6)
			}
			got := globalNorm(clipped)
			switch {
			case maxNorm > 0 && maxNorm < want:
				if math.Abs(got-maxNorm) > 1e-5*maxNorm {
					t.Fatalf("maxNorm %g below the norm %g: clipped norm %g, want maxNorm", maxNorm, want, got)
				}
			default:
				if math.Abs(got-want) > 1e-5*want {
					t.Fatalf("maxNorm %g: clipped norm %g, want the unchanged %g", maxNorm, got, want)
				}
			}
		}
	})
}

func TestClipByGlobalNormKeepsDtype(t *testing.T) {
	onMLX(t, func() {
		g := fromData(t, []float64{3, 4}, []int{2}, mlx.BFloat16)
		clipped, norm := ClipByGlobalNorm([]*mlx.Array{g}, 1)
		if clipped[0].Dtype() != mlx.BFloat16 || norm.Dtype() != mlx.Float32 {
			t.Fatalf("clipped %s, norm %s: want bfloat16 grads and a float32 norm", clipped[0], norm)
		}
		if n := readData(t, norm)[0]; n != 5 {
			t.Fatalf("norm of bf16 [3 4] = %g, want 5", n)
		}
		// 0.6 and 0.8 rounded to bfloat16.
		assertClose(t, "clipped bf16", readData(t, clipped[0]), []float64{0.6, 0.8}, 4e-3)
	})
}

func TestClipByGlobalNormOfNothing(t *testing.T) {
	clipped, norm := ClipByGlobalNorm(nil, 1)
	if len(clipped) != 0 {
		t.Fatalf("clipping no gradients gave %d", len(clipped))
	}
	if n := readData(t, norm)[0]; n != 0 {
		t.Fatalf("norm of no gradients = %g, want 0", n)
	}
}

// TestClipByGlobalNormCompiles checks the clip traces: inside a compiled
// function it gives the same values as outside.
func TestClipByGlobalNormCompiles(t *testing.T) {
	onMLX(t, func() {
		params := fixtureParams()
		grads := gradArrays(t, params, 2, mlx.Float32)
		fn, err := mlx.Compile(func(in []*mlx.Array) ([]*mlx.Array, error) {
			clipped, norm := ClipByGlobalNorm(in, 0.5)
			return append(clipped, norm), nil
		})
		if err != nil {
			t.Fatal(err)
		}
		defer fn.Free()
		out, err := fn.Call(grads...)
		if err != nil {
			t.Fatal(err)
		}
		clipped, norm := ClipByGlobalNorm(grads, 0.5)
		for i := range clipped {
			assertClose(t, "compiled clip", readData(t, out[i]), readData(t, clipped[i]), 1e-6)
		}
		assertClose(t, "compiled norm", readData(t, out[len(out)-1]), readData(t, norm), 1e-5)
	})
}
