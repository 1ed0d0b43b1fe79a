package mlx

import (
	"math"
	"strings"
	"testing"
)

// unpackAffine is an independent reading of MLX's affine layout: each row
// of packed uint32s is a little-endian bit stream of bits-bit integers q,
// and element j of the row is scale·q + bias of its group j/groupSize.
func unpackAffine(t *testing.T, packed, scales, biases *Array, rows, cols, groupSize, bits int) []float64 {
	t.Helper()
	p, err := ToSlice[uint32](packed)
	if err != nil {
		t.Fatal(err)
	}
	s, b := values(t, scales), values(t, biases)
	words := cols * bits / 32
	if len(p) != rows*words {
		t.Fatalf("packed holds %d words, want %d rows of %d", len(p), rows, words)
	}
	out := make([]float64, rows*cols)
	for r := range rows {
		for j := range cols {
			var q uint64
			for k := range bits {
				bit := j*bits + k
				q |= uint64(p[r*words+bit/32]>>(bit%32)&1) << k
			}
			g := r*(cols/groupSize) + j/groupSize
			out[r*cols+j] = s[g]*float64(q) + b[g]
		}
	}
	return out
}

func randF32(seed uint64, shape ...int) *Array {
	n := 1
	for _, d := range shape {
		n *= d
	}
	v := lcg(seed, n)
	f := make([]float32, n)
	for i, x := range v {
		f[i] = float32(x)
	}
	return FromSlice(f, shape...)
}

// TestQuantizeRoundTrip checks every bit width and group size: the packed
// layout read independently equals Dequantize, and every element is within
// one quantization step of the original (half a step of rounding, and up to
// half a step more where MLX shifts the grid so that zero is exact).
func TestQuantizeRoundTrip(t *testing.T) {
	onMLX(t, func() {
		const rows, cols = 4, 256
		w := randF32(7, rows, cols)
		wv := values(t, w)
		for _, bits := range QuantBits {
			for _, gs := range QuantGroupSizes {
				packed, scales, biases := Quantize(w, gs, bits)
				checkShape(t, "packed", packed, rows, cols*bits/32)
				checkShape(t, "scales", scales, rows, cols/gs)
				checkShape(t, "biases", biases, rows, cols/gs)
				if packed.Dtype() != Uint32 || scales.Dtype() != Float32 {
					t.Fatalf("bits %d gs %d: dtypes %v, %v; want uint32, float32", bits, gs, packed.Dtype(), scales.Dtype())
				}
				ref := unpackAffine(t, packed, scales, biases, rows, cols, gs, bits)
				deq := values(t, Dequantize(packed, scales, biases, gs, bits))
				sv := values(t, scales)
				for i := range ref {
					if math.Abs(ref[i]-deq[i]) > 1e-5 {
						t.Fatalf("bits %d gs %d: element %d dequantizes to %g, the layout reads %g", bits, gs, i, deq[i], ref[i])
					}
					step := math.Abs(sv[(i/cols)*(cols/gs)+(i%cols)/gs])
					if e := math.Abs(deq[i] - wv[i]); e > step+1e-5 {
						t.Fatalf("bits %d gs %d: element %d off by %g, more than a step %g", bits, gs, i, e, step)
					}
				}
			}
		}
	})
}

// TestQuantizedMatmul compares x·Wᵀ and x·W over the quantized W with
// float64 products of the dequantized matrix, and the gradient with
// respect to x with its closed form.
func TestQuantizedMatmul(t *testing.T) {
	onMLX(t, func() {
		const n, in, out, gs, bits = 3, 128, 64, 64, 4
		x := randF32(11, n, in)
		w := randF32(12, out, in)
		packed, scales, biases := Quantize(w, gs, bits)
		wq := values(t, Dequantize(packed, scales, biases, gs, bits)) // [out, in]
		xv := values(t, x)
		got := values(t, QuantizedMatmul(x, packed, scales, biases, true, gs, bits))
		for i := range n {
			for o := range out {
				var want float64
				for k := range in {
					want += xv[i*in+k] * wq[o*in+k]
				}
				if math.Abs(got[i*out+o]-want) > 1e-3 {
					t.Fatalf("x·Wᵀ[%d,%d] = %g, want %g", i, o, got[i*out+o], want)
				}
			}
		}
		// Without transpose, W [in', out'] = the same packed rows read as [out, in] times x [n, out].
		x2 := randF32(13, n, out)
		x2v := values(t, x2)
		got2 := values(t, QuantizedMatmul(x2, packed, scales, biases, false, gs, bits))
		for i := range n {
			for k := range in {
				var want float64
				for o := range out {
					want += x2v[i*out+o] * wq[o*in+k]
				}
				if math.Abs(got2[i*in+k]-want) > 1e-3 {
					t.Fatalf("x·W[%d,%d] = %g, want %g", i, k, got2[i*in+k], want)
				}
			}
		}
		// d/dx sum(x·Wᵀ) = column sums of W for every row.
		vg, err := ValueAndGrad(func(a []*Array) ([]*Array, error) {
			return []*Array{Sum(QuantizedMatmul(a[0], a[1], a[2], a[3], true, gs, bits))}, nil
		}, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer vg.Free()
		_, g, err := vg.Call(x, packed, scales, biases)
		if err != nil {
			t.Fatal(err)
		}
		gv := values(t, g[0])
		for k := range in {
			var want float64
			for o := range out {
				want += wq[o*in+k]
			}
			if math.Abs(gv[k]-want) > 1e-3 || math.Abs(gv[in+k]-want) > 1e-3 {
				t.Fatalf("gradient at column %d: %g, %g; want %g", k, gv[k], gv[in+k], want)
			}
		}
	})
}

func TestQuantizeRefusesBadSettings(t *testing.T) {
	onMLX(t, func() {
		w := randF32(1, 4, 64)
		for _, c := range []struct {
			gs, bits int
			want     string
		}{
			{64, 7, "bits 7"}, {48, 4, "group size 48"}, {16, 4, "group size 16"},
		} {
			p, _, _ := Quantize(w, c.gs, c.bits)
			if err := p.Err(); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("Quantize(gs %d, bits %d): error %v, want one naming %q", c.gs, c.bits, err, c.want)
			}
		}
		// 100 columns are no multiple of the group size: MLX's own error comes back.
		p, _, _ := Quantize(randF32(2, 4, 100), 64, 4)
		if p.Err() == nil {
			t.Error("Quantize of 100 columns in groups of 64: no error")
		}
	})
}

// TestCheckpointGradients differentiates a two-layer function with and
// without Checkpoint around it, inside Compile, and asserts the same value
// and gradients and that the checkpointed function ran again for the
// backward pass (MLX recomputes it there).
func TestCheckpointGradients(t *testing.T) {
	onMLX(t, func() {
		calls := 0
		body := func(in []*Array) ([]*Array, error) {
			calls++
			h := Tanh(Matmul(in[0], in[1]))
			return []*Array{Multiply(h, Sigmoid(Matmul(h, in[2])))}, nil
		}
		ck, err := Checkpoint(body)
		if err != nil {
			t.Fatal(err)
		}
		defer ck.Free()
		plain, err := NewClosure(body)
		if err != nil {
			t.Fatal(err)
		}
		defer plain.Free()
		x, w1, w2 := randF32(3, 4, 8), randF32(4, 8, 8), randF32(5, 8, 8)
		run := func(f *Closure) (float64, [][]float64, int) {
			calls = 0
			loss := func(in []*Array) ([]*Array, error) {
				out, err := f.Call(in...)
				if err != nil {
					return nil, err
				}
				return []*Array{Sum(Square(out[0]))}, nil
			}
			vg, err := ValueAndGrad(loss, 0, 1, 2)
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
			var out []*Array
			for range 2 { // the second call replays the trace
				if out, err = step.Call(x, w1, w2); err != nil {
					t.Fatal(err)
				}
			}
			var gs [][]float64
			for _, g := range out[1:] {
				gs = append(gs, values(t, g))
			}
			return values(t, out[0])[0], gs, calls
		}
		v0, g0, c0 := run(plain)
		v1, g1, c1 := run(ck)
		if math.Abs(v0-v1) > 1e-6*math.Abs(v0) {
			t.Fatalf("loss %g with checkpoint, %g without", v1, v0)
		}
		for i := range g0 {
			for j := range g0[i] {
				if math.Abs(g0[i][j]-g1[i][j]) > 1e-6 {
					t.Fatalf("gradient %d[%d]: %g with checkpoint, %g without", i, j, g1[i][j], g0[i][j])
				}
			}
		}
		if c0 != 1 || c1 != 2 {
			t.Fatalf("body ran %d times without checkpoint and %d with, want 1 and 2 (traced once, recomputed once)", c0, c1)
		}
	})
}
