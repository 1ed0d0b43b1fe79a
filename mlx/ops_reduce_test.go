package mlx

import (
	"math"
	"testing"
)

func TestReductions(t *testing.T) {
	onMLX(t, func() {
		// a = [[1, 2, 3], [4, 5, 6]]
		a := f32([]float64{1, 2, 3, 4, 5, 6}, 2, 3)
		lse := func(xs ...float64) float64 {
			s := 0.0
			for _, x := range xs {
				s += math.Exp(x)
			}
			return math.Log(s)
		}
		cases := []struct {
			name  string
			got   *Array
			shape []int
			want  []float64
		}{
			{"sum all", Sum(a), []int{}, []float64{21}},
			{"sum axis0", Sum(a, 0), []int{3}, []float64{5, 7, 9}},
			{"sum axis1", Sum(a, 1), []int{2}, []float64{6, 15}},
			{"sum axis-1", Sum(a, -1), []int{2}, []float64{6, 15}},
			{"sum both axes", Sum(a, 0, 1), []int{}, []float64{21}},
			{"sum keep all", SumKeep(a), []int{1, 1}, []float64{21}},
			{"sum keep axis1", SumKeep(a, 1), []int{2, 1}, []float64{6, 15}},
			{"mean all", Mean(a), []int{}, []float64{3.5}},
			{"mean axis0", Mean(a, 0), []int{3}, []float64{2.5, 3.5, 4.5}},
			{"mean keep axis1", MeanKeep(a, 1), []int{2, 1}, []float64{2, 5}},
			{"max all", Max(a), []int{}, []float64{6}},
			{"max axis0", Max(a, 0), []int{3}, []float64{4, 5, 6}},
			{"max keep axis1", MaxKeep(a, 1), []int{2, 1}, []float64{3, 6}},
			{"min all", Min(a), []int{}, []float64{1}},
			{"min axis1", Min(a, 1), []int{2}, []float64{1, 4}},
			{"min keep axis0", MinKeep(a, 0), []int{1, 3}, []float64{1, 2, 3}},
			{"logsumexp all", LogSumExp(a), []int{}, []float64{lse(1, 2, 3, 4, 5, 6)}},
			{"logsumexp axis1", LogSumExp(a, 1), []int{2}, []float64{lse(1, 2, 3), lse(4, 5, 6)}},
			{"logsumexp keep axis0", LogSumExpKeep(a, 0), []int{1, 3}, []float64{lse(1, 4), lse(2, 5), lse(3, 6)}},
		}
		for _, c := range cases {
			checkClose(t, c.name, c.got, c.shape, c.want, 1e-6)
		}
		// logsumexp stays finite where exp overflows float32.
		big := f32([]float64{1000, 1000})
		checkClose(t, "logsumexp large", LogSumExp(big), []int{}, []float64{1000 + math.Ln2}, 1e-6)
	})
}

func TestBooleanReductions(t *testing.T) {
	onMLX(t, func() {
		// b = [[true, false], [true, true]]
		b := FromSlice([]bool{true, false, true, true}, 2, 2)
		checkBools(t, "all", All(b), []int{}, []bool{false})
		checkBools(t, "all axis0", All(b, 0), []int{2}, []bool{true, false})
		checkBools(t, "all axis1", All(b, 1), []int{2}, []bool{false, true})
		checkBools(t, "all keep axis1", AllKeep(b, 1), []int{2, 1}, []bool{false, true})
		checkBools(t, "all keep", AllKeep(b), []int{1, 1}, []bool{false})
		checkBools(t, "any", Any(b), []int{}, []bool{true})
		checkBools(t, "any axis1", Any(FromSlice([]bool{false, false, true, false}, 2, 2), 1), []int{2}, []bool{false, true})
		checkBools(t, "any keep axis0", AnyKeep(b, 0), []int{1, 2}, []bool{true, true})
		checkBools(t, "any keep", AnyKeep(b), []int{1, 1}, []bool{true})
	})
}

func TestArgmax(t *testing.T) {
	onMLX(t, func() {
		a := f32([]float64{1, 9, 3, 7, 2, 8}, 2, 3)
		checkInts(t, "argmax axis1", Argmax(a, 1, false), []int{2}, []int64{1, 2})
		checkInts(t, "argmax axis0", Argmax(a, 0, false), []int{3}, []int64{1, 0, 1})
		checkInts(t, "argmax keep", Argmax(a, -1, true), []int{2, 1}, []int64{1, 2})
		checkInts(t, "argmax all", ArgmaxAll(a), []int{}, []int64{1})
		if d := Argmax(a, 1, false).Dtype(); d != Uint32 {
			t.Fatalf("argmax dtype %v, want uint32", d)
		}
	})
}

func TestSoftmax(t *testing.T) {
	onMLX(t, func() {
		in := []float64{1, 2, 3, -1, 0, 1}
		want := make([]float64, 6)
		for r := range 2 {
			row := in[3*r : 3*r+3]
			s := 0.0
			for _, v := range row {
				s += math.Exp(v)
			}
			for j, v := range row {
				want[3*r+j] = math.Exp(v) / s
			}
		}
		a := f32(in, 2, 3)
		checkClose(t, "softmax axis -1", Softmax(a, -1), []int{2, 3}, want, 1e-6)
		checkClose(t, "softmax precise", SoftmaxPrecise(a, 1), []int{2, 3}, want, 1e-6)
		// Over all axes the six entries sum to one.
		z := 0.0
		for _, v := range in {
			z += math.Exp(v)
		}
		checkClose(t, "softmax all axes", Softmax(a), []int{2, 3}, mapf(in, func(v float64) float64 { return math.Exp(v) / z }), 1e-6)
		// Large logits do not overflow.
		checkClose(t, "softmax large", Softmax(f32([]float64{1000, 1000}), -1), []int{2}, []float64{0.5, 0.5}, 1e-6)
	})
}
