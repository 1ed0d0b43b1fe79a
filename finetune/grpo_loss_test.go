package finetune

import (
	"fmt"
	"math"
	"testing"

	"github.com/posttrainllm/posttrainllm/internal/runtest"
	"github.com/posttrainllm/posttrainllm/mlx"
	"github.com/posttrainllm/posttrainllm/model"
	"github.com/posttrainllm/posttrainllm/rl"
	"github.com/posttrainllm/posttrainllm/step"
)

// completionSpan picks each row's positions from its first weighted one,
// n of them, with weight zero where they run past the row, and the first
// n positions of a row with no weights.
func TestCompletionSpan(t *testing.T) {
	const B, T, n = 4, 6, 3
	w := []float32{
		0, 0, 1, 2, 3, 0, // completion at 2-4
		0, 0, 0, 0, 5, 6, // at 4-5: the span runs past the row
		0, 0, 0, 0, 0, 0, // masked
		7, 8, 9, 0, 0, 0, // from the first position
	}
	at, weight := completionSpan(mlx.FromSlice(w, B, T), n)
	gotAt, err := at.Int32s()
	if err != nil {
		t.Fatal(err)
	}
	gotW, err := weight.Float32s()
	if err != nil {
		t.Fatal(err)
	}
	wantAt := []int32{2, 3, 4, 4, 5, 5, 0, 1, 2, 0, 1, 2}
	wantW := []float32{1, 2, 3, 5, 6, 0, 0, 0, 0, 7, 8, 9}
	if fmt.Sprint(gotAt) != fmt.Sprint(wantAt) || fmt.Sprint(gotW) != fmt.Sprint(wantW) {
		t.Fatalf("positions %v weights %v, want %v and %v", gotAt, gotW, wantAt, wantW)
	}
}

// The GRPO loss scored over each completion's span, each group's prompt
// run once, gives the loss and auxiliary sums of rl.PolicyLoss over every
// position of the rows, with the sampling policy's and the reference's
// log-probabilities as position inputs (iterations 2, a full fine-tune
// with a KL term), and the same gradients: for a microbatch of whole
// groups and for one that is not (scored row by row).
func TestGRPOLossOverTheCompletionsIsTheLossOverTheRows(t *testing.T) {
	const T, budget = 8, 4
	prompts := [][]int32{{7, 30, 9, 41, 4}, {2, 88, 5}}
	rows := []struct {
		prompt int
		cont   []int32
		w      float32
	}{{0, []int32{11, 12, 13, 14}, 0.2}, {0, []int32{20, 21}, 0.1}, {1, []int32{30, 31, 32, 33}, 0.05}, {1, []int32{40, 41, 42}, 0.3}}
	B := len(rows)
	var x, y []int32
	var w []float32
	for _, r := range rows {
		seq := append(append([]int32{}, prompts[r.prompt]...), r.cont...)
		rx, ry, rw := make([]int32, T), make([]int32, T), make([]float32, T)
		copy(rx, seq[:len(seq)-1])
		copy(ry, seq[1:])
		for j := range r.cont {
			rw[len(prompts[r.prompt])-1+j] = r.w
		}
		x, y, w = append(x, rx...), append(y, ry...), append(w, rw...)
	}
	m, err := model.New(runtest.TinyConfig().Model)
	if err != nil {
		t.Fatal(err)
	}
	params, err := m.Init(3)
	if err != nil {
		t.Fatal(err)
	}
	shift := func(d float32) []float32 {
		out := make([]float32, B*T)
		for i := range out {
			out[i] = -2 + d*float32(i%7)
		}
		return out
	}
	xa, ya, wa := mlx.FromSlice(x, B, T), mlx.FromSlice(y, B, T), mlx.FromSlice(w, B, T)
	adv := mlx.FromSlice([]float32{1.5, -0.5, -1, 0.25}, B)
	old, ref := mlx.FromSlice(shift(0.1), B, T), mlx.FromSlice(shift(-0.2), B, T)
	mb := step.Microbatch{X: xa, Y: ya, W: wa, Rows: []*mlx.Array{mlx.Ones([]int{B}, mlx.Float32), adv}, Positions: []*mlx.Array{old, ref}}

	valueAndGrad := func(loss step.Loss) ([]float64, [][]float64) {
		t.Helper()
		vg, err := mlx.ValueAndGrad(func(in []*mlx.Array) ([]*mlx.Array, error) {
			l, aux := loss(in, nil, mb)
			return append([]*mlx.Array{l}, aux...), nil
		}, seq(len(params))...)
		if err != nil {
			t.Fatal(err)
		}
		defer vg.Free()
		vals, grads, err := vg.Call(params...)
		if err != nil {
			t.Fatal(err)
		}
		var v []float64
		for _, a := range vals {
			f, err := a.Item()
			if err != nil {
				t.Fatal(err)
			}
			v = append(v, f)
		}
		g := make([][]float64, len(grads))
		for i, a := range grads {
			f, err := mlx.AsType(a, mlx.Float32).Float32s()
			if err != nil {
				t.Fatal(err)
			}
			for _, x := range f {
				g[i] = append(g[i], float64(x))
			}
		}
		return v, g
	}
	for _, groupSize := range []int{2, 8} { // whole groups; not whole groups
		t.Run(fmt.Sprintf("group%d", groupSize), func(t *testing.T) {
			o, err := NewGRPOObjective(GRPO{Rollout: rl.RolloutOptions{GroupSize: groupSize, MaxCompletion: budget, Temperature: 1}, Beta: 0.1, Iterations: 2}, vowelReward())
			if err != nil {
				t.Fatal(err)
			}
			fullLoss := func(p []*mlx.Array, _ []*mlx.Array, mb step.Microbatch) (*mlx.Array, []*mlx.Array) {
				ce, _ := m.LossTerms(p, mb.X, mb.Y)
				return rl.PolicyLoss(mlx.Negative(ce), mb.Positions[0], mb.Positions[1], mb.Rows[1], mb.W, o.Clip, o.Beta)
			}
			vSpan, gSpan := valueAndGrad(o.Loss(Policy{Model: m}))
			vFull, gFull := valueAndGrad(fullLoss)
			if vFull[0] == 0 || vFull[1] == 0 {
				t.Fatalf("loss %g, kl %g over the rows: want both nonzero for the test to tell", vFull[0], vFull[1])
			}
			for i := range vFull {
				if math.Abs(vSpan[i]-vFull[i]) > 1e-5*math.Max(1, math.Abs(vFull[i])) {
					t.Fatalf("output %d (loss, %v): %.7f over the completions, %.7f over the rows", i, rl.PolicyAux, vSpan[i], vFull[i])
				}
			}
			for k := range gFull {
				for i := range gFull[k] {
					if d := math.Abs(gSpan[k][i] - gFull[k][i]); d > 1e-4*math.Max(1e-2, math.Abs(gFull[k][i])) {
						t.Fatalf("%s[%d]: gradient %.7g over the completions, %.7g over the rows", m.Specs[k].Name, i, gSpan[k][i], gFull[k][i])
					}
				}
			}
		})
	}
}

// seq is 0, 1, …, n−1.
func seq(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}
