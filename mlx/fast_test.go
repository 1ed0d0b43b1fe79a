package mlx

import (
	"math"
	"testing"
)

// refRMSNorm normalises each row of length d by its root mean square.
func refRMSNorm(x, w []float64, d int, eps float64) []float64 {
	out := make([]float64, len(x))
	for r := 0; r < len(x)/d; r++ {
		row := x[r*d : (r+1)*d]
		ms := 0.0
		for _, v := range row {
			ms += v * v
		}
		inv := 1 / math.Sqrt(ms/float64(d)+eps)
		for j, v := range row {
			out[r*d+j] = v * inv * w[j]
		}
	}
	return out
}

// refLayerNorm normalises each row to zero mean and unit variance.
func refLayerNorm(x, w, b []float64, d int, eps float64) []float64 {
	out := make([]float64, len(x))
	for r := 0; r < len(x)/d; r++ {
		row := x[r*d : (r+1)*d]
		mean, v := 0.0, 0.0
		for _, e := range row {
			mean += e
		}
		mean /= float64(d)
		for _, e := range row {
			v += (e - mean) * (e - mean)
		}
		inv := 1 / math.Sqrt(v/float64(d)+eps)
		for j, e := range row {
			out[r*d+j] = (e-mean)*inv*w[j] + b[j]
		}
	}
	return out
}

func TestRMSNorm(t *testing.T) {
	onMLX(t, func() {
		const d = 8
		x, w := lcg(1, 3*d), lcg(2, d)
		got := RMSNorm(f32(x, 3, d), f32(w), 1e-5)
		checkClose(t, "rms_norm", got, []int{3, d}, refRMSNorm(x, w, d, 1e-5), 1e-5)
		ones := mapf(w, func(float64) float64 { return 1 })
		checkClose(t, "rms_norm without weight", RMSNorm(f32(x, 3, d), nil, 1e-5), []int{3, d},
			refRMSNorm(x, ones, d, 1e-5), 1e-5)
	})
}

func TestLayerNorm(t *testing.T) {
	onMLX(t, func() {
		const d = 6
		x, w, b := lcg(3, 4*d), lcg(4, d), lcg(5, d)
		got := LayerNorm(f32(x, 4, d), f32(w), f32(b), 1e-5)
		checkClose(t, "layer_norm", got, []int{4, d}, refLayerNorm(x, w, b, d, 1e-5), 1e-5)
		ones, zeros := mapf(w, func(float64) float64 { return 1 }), make([]float64, d)
		checkClose(t, "layer_norm plain", LayerNorm(f32(x, 4, d), nil, nil, 1e-5), []int{4, d},
			refLayerNorm(x, ones, zeros, d, 1e-5), 1e-5)
	})
}

// refRoPE rotates the first dims features of each [T, D] row of x as MLX's
// non-traditional rotary embedding does: feature j pairs with feature
// j+dims/2, rotated by angle (offset+t)·scale·base^(-2j/dims).
func refRoPE(x []float64, rows, T, D, dims int, base, scale float64, offset int) []float64 {
	out := append([]float64(nil), x...)
	half := dims / 2
	for r := 0; r < rows; r++ {
		for t := 0; t < T; t++ {
			row := x[(r*T+t)*D : (r*T+t+1)*D]
			o := out[(r*T+t)*D : (r*T+t+1)*D]
			pos := float64(offset+t) * scale
			for j := 0; j < half; j++ {
				theta := pos * math.Pow(base, -2*float64(j)/float64(dims))
				c, s := math.Cos(theta), math.Sin(theta)
				x1, x2 := row[j], row[j+half]
				o[j] = x1*c - x2*s
				o[j+half] = x1*s + x2*c
			}
		}
	}
	return out
}

func TestRoPE(t *testing.T) {
	onMLX(t, func() {
		const B, H, T, D = 1, 2, 5, 8
		x := lcg(6, B*H*T*D)
		cases := []struct {
			dims   int
			base   float64
			scale  float64
			offset int
		}{
			{D, 10000, 1, 0},
			{D, 10000, 1, 3},
			{4, 100, 0.5, 2}, // partial rotation: features 4..7 pass through
		}
		for _, c := range cases {
			got := RoPE(f32(x, B, H, T, D), c.dims, false, float32(c.base), float32(c.scale), c.offset)
			want := refRoPE(x, B*H, T, D, c.dims, c.base, c.scale, c.offset)
			checkClose(t, "rope", got, []int{B, H, T, D}, want, 1e-5)
		}
		// Traditional RoPE rotates adjacent pairs instead: it differs.
		trad := values(t, RoPE(f32(x, B, H, T, D), D, true, 10000, 1, 1))
		split := refRoPE(x, B*H, T, D, D, 10000, 1, 1)
		diff := 0.0
		for i := range trad {
			diff = math.Max(diff, math.Abs(trad[i]-split[i]))
		}
		if diff < 1e-3 {
			t.Fatal("traditional RoPE equals split-half RoPE; the traditional flag is ignored")
		}
	})
}

// RoPERows rotates each batch row from its own position: row b equals
// RoPE of that row alone with offset offsets[b], with a base and with
// periods.
func TestRoPERows(t *testing.T) {
	onMLX(t, func() {
		const B, H, T, D = 3, 2, 4, 8
		x := lcg(8, B*H*T*D)
		offsets := []int32{0, 5, 17}
		periods := make([]float32, D/2)
		for i := range periods {
			periods[i] = float32(math.Pow(500, 2*float64(i)/D))
		}
		for _, freqs := range []*Array{nil, FromSlice(periods, D/2)} {
			got := values(t, RoPERows(f32(x, B, H, T, D), D, false, 500, 1, FromSlice(offsets, B), freqs))
			for b, off := range offsets {
				row := x[b*H*T*D : (b+1)*H*T*D]
				want := refRoPE(row, H, T, D, D, 500, 1, int(off))
				closeSlices(t, "rope rows", got[b*H*T*D:(b+1)*H*T*D], want, 1e-5)
			}
		}
	})
}

// RoPE with frequencies given as periods base^(2i/dims) is RoPE with that
// base; halving one period doubles that pair's rotation and no other's.
func TestRoPEFreqs(t *testing.T) {
	onMLX(t, func() {
		const B, H, T, D = 1, 2, 5, 8
		x := lcg(7, B*H*T*D)
		periods := make([]float32, D/2)
		for i := range periods {
			periods[i] = float32(math.Pow(100, 2*float64(i)/D))
		}
		got := RoPEFreqs(f32(x, B, H, T, D), D, false, FromSlice(periods, D/2), 0.5, 2)
		checkClose(t, "rope freqs", got, []int{B, H, T, D}, refRoPE(x, B*H, T, D, D, 100, 0.5, 2), 1e-5)
		periods[1] /= 2
		got = RoPEFreqs(f32(x, B, H, T, D), D, false, FromSlice(periods, D/2), 1, 0)
		want := refRoPE(x, B*H, T, D, D, 100, 1, 0)
		twice := refRoPE(x, B*H, T, D, D, 100, 2, 0)
		for r := 0; r < B*H*T; r++ {
			for _, j := range []int{1, 1 + D/2} {
				want[r*D+j] = twice[r*D+j]
			}
		}
		checkClose(t, "rope freqs, one period halved", got, []int{B, H, T, D}, want, 1e-5)
	})
}

// refAttention computes softmax(q·kᵀ·scale + mask)·v per [T, D] head.
func refAttention(q, k, v []float64, heads, T, D int, scale float64, causal bool) []float64 {
	out := make([]float64, heads*T*D)
	for h := 0; h < heads; h++ {
		base := h * T * D
		for i := 0; i < T; i++ {
			scores := make([]float64, T)
			m := math.Inf(-1)
			for j := 0; j < T; j++ {
				if causal && j > i {
					scores[j] = math.Inf(-1)
					continue
				}
				s := 0.0
				for d := 0; d < D; d++ {
					s += q[base+i*D+d] * k[base+j*D+d]
				}
				scores[j] = s * scale
				m = math.Max(m, scores[j])
			}
			z := 0.0
			for j := range scores {
				scores[j] = math.Exp(scores[j] - m)
				z += scores[j]
			}
			for j := range scores {
				for d := 0; d < D; d++ {
					out[base+i*D+d] += scores[j] / z * v[base+j*D+d]
				}
			}
		}
	}
	return out
}

func TestScaledDotProductAttention(t *testing.T) {
	onMLX(t, func() {
		const B, H, T, D = 2, 2, 6, 4
		n := B * H * T * D
		q, k, v := lcg(7, n), lcg(8, n), lcg(9, n)
		scale := 1 / math.Sqrt(D)
		for _, causal := range []bool{true, false} {
			mask := NoMask
			if causal {
				mask = CausalMask
			}
			got := ScaledDotProductAttention(f32(q, B, H, T, D), f32(k, B, H, T, D), f32(v, B, H, T, D),
				float32(scale), mask, nil)
			checkClose(t, "sdpa "+string(mask), got, []int{B, H, T, D}, refAttention(q, k, v, B*H, T, D, scale, causal), 1e-5)
		}
		// An additive mask array equal to the causal mask gives the same result.
		add := make([]float64, T*T)
		for i := range T {
			for j := i + 1; j < T; j++ {
				add[i*T+j] = math.Inf(-1)
			}
		}
		got := ScaledDotProductAttention(f32(q, B, H, T, D), f32(k, B, H, T, D), f32(v, B, H, T, D),
			float32(scale), NoMask, f32(add, T, T))
		checkClose(t, "sdpa mask array", got, []int{B, H, T, D}, refAttention(q, k, v, B*H, T, D, scale, true), 1e-5)
	})
}

// refCrossEntropy is -log_softmax(logits)[target] per row.
func refCrossEntropy(logits []float64, targets []int32, V int) []float64 {
	out := make([]float64, len(targets))
	for r, tg := range targets {
		row := logits[r*V : (r+1)*V]
		m := math.Inf(-1)
		for _, x := range row {
			m = math.Max(m, x)
		}
		z := 0.0
		for _, x := range row {
			z += math.Exp(x - m)
		}
		out[r] = -(row[tg] - m - math.Log(z))
	}
	return out
}

func TestCrossEntropy(t *testing.T) {
	onMLX(t, func() {
		const B, T, V = 2, 3, 7
		logits := mapf(lcg(10, B*T*V), func(x float64) float64 { return 4 * x })
		targets := []int32{0, 6, 3, 2, 5, 1}
		got := CrossEntropy(f32(logits, B, T, V), FromSlice(targets, B, T))
		checkClose(t, "cross_entropy", got, []int{B, T}, refCrossEntropy(logits, targets, V), 1e-5)
		// Huge logits stay finite.
		big := []float64{1000, 0, -1000}
		checkClose(t, "cross_entropy large", CrossEntropy(f32(big, 1, 3), FromSlice([]int32{1})), []int{1},
			[]float64{1000}, 1e-6)
	})
}
