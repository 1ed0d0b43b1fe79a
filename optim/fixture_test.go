package optim

import (
	"math"
	"slices"
	"strconv"
	"testing"

	"github.com/posttrainllm/posttrainllm/mlx"
)

// fixtureParams covers every role: a wide Matrix with decay, a tall Matrix
// without decay (Muon's transpose path and decay masking on a 2-D weight), a
// 2-D non-Matrix weight with decay (Muon's AdamW fallback, like an
// embedding), and a 1-D parameter without decay (a norm or bias).
func fixtureParams() []Param {
	return []Param{
		{Name: "w", Shape: []int{2, 3}, Decay: true, Matrix: true},
		{Name: "v", Shape: []int{4, 2}, Decay: false, Matrix: true},
		{Name: "e", Shape: []int{3, 2}, Decay: true},
		{Name: "b", Shape: []int{3}},
	}
}

// fixtureLRs is the learning rate of each update in the reference tests.
var fixtureLRs = []float64{0.05, 0.1, 0.07}

func numel(shape []int) int {
	n := 1
	for _, d := range shape {
		n *= d
	}
	return n
}

// initialValue is parameter i's starting data.
func initialValue(i int, p Param) []float64 {
	out := make([]float64, numel(p.Shape))
	for k := range out {
		out[k] = 0.8*math.Sin(1.7*float64(k)+float64(i)+0.3) + 0.05*float64(i)
	}
	return out
}

// gradValue is parameter i's gradient at update step (0-based).
func gradValue(step, i int, p Param) []float64 {
	out := make([]float64, numel(p.Shape))
	for k := range out {
		out[k] = math.Cos(0.9*float64(k)+2.3*float64(i)+1.1*float64(step)) * (1 + 0.3*float64(step))
	}
	return out
}

// fromData builds an array of shape and dtype from float64 data.
func fromData(t *testing.T, data []float64, shape []int, dtype mlx.Dtype) *mlx.Array {
	t.Helper()
	f := make([]float32, len(data))
	for k, v := range data {
		f[k] = float32(v)
	}
	a := mlx.FromSlice(f, shape...)
	if dtype != mlx.Float32 {
		b := mlx.AsType(a, dtype)
		a.Free()
		a = b
	}
	if err := a.Err(); err != nil {
		t.Fatalf("building %v %s array: %v", shape, dtype, err)
	}
	return a
}

// readData evaluates a and returns its elements as float64.
func readData(t *testing.T, a *mlx.Array) []float64 {
	t.Helper()
	f, err := a.Float32s()
	if err != nil {
		t.Fatalf("reading %s: %v", a, err)
	}
	out := make([]float64, len(f))
	for k, v := range f {
		out[k] = float64(v)
	}
	return out
}

// paramArrays returns the fixture's initial parameters as arrays.
func paramArrays(t *testing.T, params []Param, dtype mlx.Dtype) []*mlx.Array {
	out := make([]*mlx.Array, len(params))
	for i, p := range params {
		out[i] = fromData(t, initialValue(i, p), p.Shape, dtype)
	}
	return out
}

// gradArrays returns the fixture's gradients of update step as arrays.
func gradArrays(t *testing.T, params []Param, step int, dtype mlx.Dtype) []*mlx.Array {
	out := make([]*mlx.Array, len(params))
	for i, p := range params {
		out[i] = fromData(t, gradValue(step, i, p), p.Shape, dtype)
	}
	return out
}

// assertClose fails when any element differs from want by more than tol.
func assertClose(t *testing.T, what string, got, want []float64, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: got %d elements, want %d", what, len(got), len(want))
	}
	for k := range got {
		if d := math.Abs(got[k] - want[k]); !(d <= tol) {
			t.Fatalf("%s[%d] = %.9g, want %.9g (|diff| %.3g > %.3g)\n got  %v\n want %v", what, k, got[k], want[k], d, tol, got, want)
		}
	}
}

// maxAbsDiff returns the largest element-wise difference.
func maxAbsDiff(a, b []float64) float64 {
	d := 0.0
	for k := range a {
		d = max(d, math.Abs(a[k]-b[k]))
	}
	return d
}

// refOptimizer is an optimizer written out again in plain float64: step
// applies update t (1-based) with learning rate lr to params in place, and
// keeps its state in st under the implementation's state names.
type refOptimizer func(t int, lr float64, params []Param, p, g [][]float64, st map[string][]float64)

// refSlot returns st[name], creating n zeros on first use.
func refSlot(st map[string][]float64, name string, n int) []float64 {
	if _, ok := st[name]; !ok {
		st[name] = make([]float64, n)
	}
	return st[name]
}

// checkAgainstReference runs opt and ref for len(fixtureLRs) updates on the
// fixture and asserts every parameter and state array matches within 1e-5
// after each update, including the update counter, and that the state names
// are exactly those the reference used.
func checkAgainstReference(t *testing.T, opt Optimizer, params []Param, ref refOptimizer) {
	t.Helper()
	onMLX(t, func() {
		ps := paramArrays(t, params, mlx.Float32)
		state, err := opt.Init()
		if err != nil {
			t.Fatal(err)
		}
		names := opt.StateNames()
		refP := make([][]float64, len(params))
		for i, p := range params {
			refP[i] = initialValue(i, p)
		}
		refSt := map[string][]float64{}
		for step, lrv := range fixtureLRs {
			gs := gradArrays(t, params, step, mlx.Float32)
			lr := mlx.Scalar(lrv, mlx.Float32)
			newPs, newState, err := opt.Update(ps, gs, state, lr)
			if err != nil {
				t.Fatalf("update %d: %v", step, err)
			}
			refG := make([][]float64, len(params))
			for i, p := range params {
				refG[i] = gradValue(step, i, p)
			}
			ref(step+1, lrv, params, refP, refG, refSt)

			for i, p := range params {
				assertClose(t, opt.Name()+" update "+strconv.Itoa(step)+" param "+p.Name, readData(t, newPs[i]), refP[i], 1e-5)
			}
			if got := readData(t, newState[0]); got[0] != float64(step+1) {
				t.Fatalf("%s: step counter after update %d = %v, want %d", opt.Name(), step, got[0], step+1)
			}
			for j := 1; j < len(names); j++ {
				want, ok := refSt[names[j]]
				if !ok {
					t.Fatalf("%s: state %q is not one the reference keeps (reference has %v)", opt.Name(), names[j], mapKeys(refSt))
				}
				assertClose(t, opt.Name()+" update "+strconv.Itoa(step)+" state "+names[j], readData(t, newState[j]), want, 1e-5)
			}
			if len(refSt) != len(names)-1 {
				t.Fatalf("%s: reference keeps %d state arrays %v, implementation %d %v", opt.Name(), len(refSt), mapKeys(refSt), len(names)-1, names)
			}
			mlx.Free(ps...)
			mlx.Free(state...)
			mlx.Free(gs...)
			lr.Free()
			ps, state = newPs, newState
		}
	})
}

func mapKeys(m map[string][]float64) []string {
	var k []string
	for name := range m {
		k = append(k, name)
	}
	slices.Sort(k)
	return k
}

// onMLX runs a test's body on the MLX thread, as a training step runs,
// inside a scope that frees every array the body creates. t.Fatal inside
// body ends the test as usual: mlx.Do passes its Goexit on.
func onMLX(t testing.TB, body func()) {
	t.Helper()
	_ = mlx.Do(func() error {
		scope := mlx.NewScope()
		defer scope.Close()
		body()
		return nil
	})
}
