package finetune

import (
	"math"
	"testing"

	"github.com/posttrainllm/posttrainllm/data"
	"github.com/posttrainllm/posttrainllm/internal/mlxtest"
	"github.com/posttrainllm/posttrainllm/mlx"
	"github.com/posttrainllm/posttrainllm/step"
)

// The evaluator's means over all pairs, in batches that split the set
// and pad the last one, equal a row step's loss and metrics over the
// whole set at once (compiled or not, with and without reference
// inputs).
func TestPairEvaluatorMatchesStep(t *testing.T) {
	m, xs, ys, mask := prefFixture(t)
	ref := []float32{-20, -21, -19.5, -22, -18, -20.5, -21, -19}
	mlxtest.Run(t, func(t testing.TB) {
		params, err := m.Init(1)
		if err != nil {
			t.Fatal(err)
		}
		rows := &data.Rows{T: 6, X: xs, Y: ys, W: mask, Pairs: true}
		for _, p := range []Preference{{Objective: DPO, Beta: 0.5}, {Objective: ORPO, Lambda: 0.3}} {
			loss := PreferenceLoss(m, p)
			var refs []float32
			var inputs []*mlx.Array
			if p.NeedsReference() {
				refs, inputs = ref, []*mlx.Array{mlx.FromSlice(ref, 1, 8)}
			}
			opt := plainSGD(t, m)
			state, _ := opt.Init()
			s, err := step.NewStep(loss, opt, step.Layout{Trainable: len(m.Specs), Frozen: 0, State: len(state), Inputs: step.RowInputs, RowInputs: len(inputs), Aux: PreferenceAux}, step.StepOptions{Accum: 1, Compile: true})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Free()
			rw, _ := hostNormalize(pairWeights(8))
			res, err := s.RunRows(params, nil, state, mlx.Scalar(0, mlx.Float32), mlx.FromSlice(xs, 1, 8, 6), mlx.FromSlice(ys, 1, 8, 6),
				mlx.FromSlice(mask, 1, 8, 6), append([]*mlx.Array{mlx.FromSlice(rw, 1, 8)}, inputs...)...)
			if err != nil {
				t.Fatal(err)
			}
			want := []float64{0}
			want[0], _ = res.Loss.Item()
			for _, a := range res.Aux {
				v, _ := a.Item()
				want = append(want, v)
			}
			for _, compile := range []bool{true, false} {
				e, err := NewPairEvaluator(loss, len(params), 0, compile)
				if err != nil {
					t.Fatal(err)
				}
				got, err := e.Run(params, nil, rows, refs, 5) // batches of 6 rows: 3 pairs, then 1 and 2 of padding
				e.Free()
				if err != nil {
					t.Fatal(err)
				}
				vals := []float64{got.Loss, got.RewardChosen, got.RewardRejected, got.Margin, got.Accuracy}
				for i := range vals {
					if math.Abs(vals[i]-want[i]) > 1e-5*math.Max(1, math.Abs(want[i])) {
						t.Errorf("%s compile %v: value %d is %.7g, the step's %.7g", p.Objective, compile, i, vals[i], want[i])
					}
				}
				if got.Pairs != 4 {
					t.Errorf("%d pairs, want 4", got.Pairs)
				}
			}
		}
	})
}
