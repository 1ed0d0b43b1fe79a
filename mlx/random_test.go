package mlx

import (
	"math"
	"slices"
	"testing"
)

func TestRandomKeyDeterminism(t *testing.T) {
	onMLX(t, func() {
		draw := func(key *Array) []float64 { return values(t, RandomNormal([]int{16}, Float32, 0, 1, key)) }
		a, b := draw(RandomKey(42)), draw(RandomKey(42))
		if !slices.Equal(a, b) {
			t.Fatalf("same seed gave different values:\n%v\n%v", a, b)
		}
		if c := draw(RandomKey(43)); slices.Equal(a, c) {
			t.Fatal("seeds 42 and 43 gave identical values")
		}
		k := RandomKey(7)
		checkShape(t, "key", k, 2)
		if k.Dtype() != Uint32 {
			t.Fatalf("key dtype %v, want uint32", k.Dtype())
		}
		split1, split2 := RandomSplit(k, 3), RandomSplit(k, 3)
		if len(split1) != 3 {
			t.Fatalf("split into 3 gave %d keys", len(split1))
		}
		var draws [][]float64
		for i := range split1 {
			checkShape(t, "split key", split1[i], 2)
			if !slices.Equal(ints(t, split1[i]), ints(t, split2[i])) {
				t.Fatalf("splitting one key twice gave different key %d", i)
			}
			draws = append(draws, draw(split1[i]))
		}
		for i := range draws {
			for j := i + 1; j < len(draws); j++ {
				if slices.Equal(draws[i], draws[j]) {
					t.Fatalf("split keys %d and %d gave identical values", i, j)
				}
			}
			if slices.Equal(draws[i], draw(k)) {
				t.Fatalf("split key %d draws the same values as its parent", i)
			}
		}
	})
}

func TestRandomNormalMoments(t *testing.T) {
	onMLX(t, func() {
		const n = 100_000
		const loc, scale = 2.0, 3.0
		v := values(t, RandomNormal([]int{n}, Float32, loc, scale, RandomKey(1)))
		mean, sq := 0.0, 0.0
		for _, x := range v {
			mean += x
		}
		mean /= n
		for _, x := range v {
			sq += (x - mean) * (x - mean)
		}
		std := math.Sqrt(sq / (n - 1))
		// The standard error of the mean is 3/sqrt(1e5) ≈ 0.0095; of the std ≈ 0.0067.
		if math.Abs(mean-loc) > 0.05 || math.Abs(std-scale) > 0.05 {
			t.Fatalf("N(%g, %g²) sample: mean %g, std %g", loc, scale, mean, std)
		}
		within := 0
		for _, x := range v {
			if math.Abs(x-loc) < scale {
				within++
			}
		}
		if frac := float64(within) / n; math.Abs(frac-0.6827) > 0.01 {
			t.Fatalf("%.4f of samples within one std, want ≈ 0.6827", frac)
		}
		bf := RandomNormal([]int{4}, BFloat16, 0, 1, RandomKey(1))
		if bf.Dtype() != BFloat16 || bf.Err() != nil {
			t.Fatalf("bfloat16 normal gave %v (%v)", bf, bf.Err())
		}
	})
}

func TestRandomUniformRange(t *testing.T) {
	onMLX(t, func() {
		const n = 100_000
		v := values(t, RandomUniform([]int{n}, Float32, -2, 3, RandomKey(2)))
		mean := 0.0
		lo, hi := math.Inf(1), math.Inf(-1)
		for _, x := range v {
			if x < -2 || x >= 3 {
				t.Fatalf("U[-2,3) sample %g out of range", x)
			}
			mean += x
			lo, hi = math.Min(lo, x), math.Max(hi, x)
		}
		mean /= n
		if math.Abs(mean-0.5) > 0.03 || lo > -1.99 || hi < 2.99 {
			t.Fatalf("U[-2,3) sample: mean %g, min %g, max %g", mean, lo, hi)
		}
		if RandomUniform([]int{2}, Float32, 1, 1, nil).Err() == nil {
			t.Fatal("uniform with low == high succeeded")
		}
	})
}

func TestRandomCategorical(t *testing.T) {
	onMLX(t, func() {
		// Row logits favour class 2 by e^12 to 1 over each other class.
		const rows = 2000
		logits := BroadcastTo(f32([]float64{0, 0, 12, 0}, 1, 4), rows, 4)
		got := RandomCategorical(logits, -1, RandomKey(3))
		checkShape(t, "categorical", got, rows)
		v := ints(t, got)
		hits := 0
		for _, c := range v {
			if c < 0 || c > 3 {
				t.Fatalf("category %d out of range", c)
			}
			if c == 2 {
				hits++
			}
		}
		if hits < rows-5 {
			t.Fatalf("dominant class drawn %d of %d times", hits, rows)
		}
		// Two equal classes are both drawn.
		even := RandomCategorical(BroadcastTo(f32([]float64{0, 0}, 1, 2), rows, 2), 1, RandomKey(4))
		ones := 0
		for _, c := range ints(t, even) {
			ones += int(c)
		}
		if ones < rows/2-200 || ones > rows/2+200 {
			t.Fatalf("class 1 of two equal classes drawn %d of %d times", ones, rows)
		}
	})
}
