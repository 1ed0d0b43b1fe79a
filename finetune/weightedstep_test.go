package finetune

import (
	"math"
	"slices"
	"testing"

	"github.com/posttrainllm/posttrainllm/internal/mlxtest"
	"github.com/posttrainllm/posttrainllm/mlx"
	"github.com/posttrainllm/posttrainllm/model"
	"github.com/posttrainllm/posttrainllm/optim"
	"github.com/posttrainllm/posttrainllm/peft"
	"github.com/posttrainllm/posttrainllm/step"
)

// weightedFixture is a tiny model with 4 sequences of 6 tokens and a mask
// that counts a different number of targets in each sequence (0 in one).
func weightedFixture(t testing.TB) (m *model.Transformer, xs, ys []int32, ws []float32) {
	t.Helper()
	m, err := model.New(model.Config{VocabSize: 32, DModel: 16, Layers: 1, Heads: 2, Context: 6})
	if err != nil {
		t.Fatal(err)
	}
	xs, ys = make([]int32, 24), make([]int32, 24)
	for i := range xs {
		xs[i] = int32((i*5 + i*i) % 32)
		ys[i] = int32((i*3 + 7) % 32)
	}
	ws = []float32{
		0, 0, 1, 1, 1, 1,
		0, 0, 0, 0, 0, 1,
		0, 0, 0, 0, 0, 0,
		1, 1, 1, 1, 1, 1,
	}
	return m, xs, ys, ws
}

// handLoss computes Σ mask·CE / Σ mask from the model's logits on the
// host, in float64.
func handLoss(t testing.TB, m *model.Transformer, params []*mlx.Array, xs, ys []int32, ws []float32, b, T int) float64 {
	t.Helper()
	logits, err := mlx.AsType(m.Logits(params, mlx.FromSlice(xs, b, T)), mlx.Float32).Float32s()
	if err != nil {
		t.Fatal(err)
	}
	V := len(logits) / (b * T)
	sum, count := 0.0, 0.0
	for p := 0; p < b*T; p++ {
		row := logits[p*V : (p+1)*V]
		mx := math.Inf(-1)
		for _, l := range row {
			mx = math.Max(mx, float64(l))
		}
		z := 0.0
		for _, l := range row {
			z += math.Exp(float64(l) - mx)
		}
		ce := mx + math.Log(z) - float64(row[ys[p]])
		sum += float64(ws[p]) * ce
		count += float64(ws[p])
	}
	return sum / count
}

func zeroLRStep(t testing.TB, m *model.Transformer, accum int) (*step.Step, []*mlx.Array) {
	t.Helper()
	return sgdStep(t, m, fullLoss(m), step.Layout{Inputs: step.WeightedInputs}, step.StepOptions{Accum: accum, Compile: true})
}

// The step's loss is the mean cross-entropy over the counted targets of
// the whole update, as computed by hand; and it, and the update, are the
// same however the sequences split into microbatches, although each
// microbatch counts a different number of targets (a per-microbatch mean
// would weigh them differently).
func TestWeightedLossMatchesHandComputedAndIgnoresSplit(t *testing.T) {
	m, xs, ys, ws := weightedFixture(t)
	mlxtest.Run(t, func(t testing.TB) {
		params, err := m.Init(1)
		if err != nil {
			t.Fatal(err)
		}
		want := handLoss(t, m, params, xs, ys, ws, 4, 6)
		var first []float32
		for _, accum := range []int{1, 2, 4} {
			s, state := zeroLRStep(t, m, accum)
			b := step.Batch{X: xs, Y: ys, W: ws, N: accum, B: 4 / accum, T: 6}
			w, total, err := b.NormalizedWeights()
			if err != nil {
				t.Fatal(err)
			}
			if total != 11 {
				t.Fatalf("weight total %g, want 11", total)
			}
			res, err := s.RunWeighted(params, nil, state, mlx.Scalar(0.5, mlx.Float32),
				mlx.FromSlice(xs, accum, 4/accum, 6), mlx.FromSlice(ys, accum, 4/accum, 6), mlx.FromSlice(w, accum, 4/accum, 6))
			if err != nil {
				t.Fatal(err)
			}
			got, err := res.Loss.Item()
			if err != nil {
				t.Fatal(err)
			}
			if math.Abs(got-want) > 1e-5*want {
				t.Errorf("accum %d: loss %.7g, hand-computed %.7g", accum, got, want)
			}
			delta, err := mlx.Subtract(res.Params[1], params[1]).Float32s()
			if err != nil {
				t.Fatal(err)
			}
			if first == nil {
				first = delta
				if slices.Max(delta) == 0 && slices.Min(delta) == 0 {
					t.Fatal("the update did not change the parameters")
				}
				continue
			}
			for i := range delta {
				if math.Abs(float64(delta[i]-first[i])) > 1e-6 {
					t.Fatalf("accum %d: update differs from accum 1 at %d: %g vs %g", accum, i, delta[i], first[i])
				}
			}
		}
	})
}

// An update whose targets are all masked (a prompt that fills the
// context) has loss 0 and gradient norm 0, not NaN, and leaves
// plain-SGD parameters as they were.
func TestAllMaskedUpdateIsZeroNotNaN(t *testing.T) {
	m, xs, ys, _ := weightedFixture(t)
	mlxtest.Run(t, func(t testing.TB) {
		params, err := m.Init(1)
		if err != nil {
			t.Fatal(err)
		}
		s, state := zeroLRStep(t, m, 2)
		st, err := step.NewState(s, params, state)
		if err != nil {
			t.Fatal(err)
		}
		defer st.Free()
		before, _ := mlx.Copy(st.Params()[1]).Float32s()
		loss, err := st.Update(0.5, step.Batch{X: xs, Y: ys, W: make([]float32, 24), N: 2, B: 2, T: 6})
		if err != nil {
			t.Fatal(err)
		}
		stats, _ := st.Stats()
		if loss != 0 || stats.GradNorm != 0 {
			t.Errorf("all-masked update: loss %g, grad norm %g; want 0 and 0", loss, stats.GradNorm)
		}
		after, _ := st.Params()[1].Float32s()
		if !slices.Equal(before, after) {
			t.Error("an all-masked update changed the parameters")
		}
	})
}

// loraSetup is a rank-2 LoRA on the attention projections of the fixture's
// model, trained with AdamW over a cosine schedule: its step, state and
// copies of the base weights and initial adapters to compare with.
func loraSetup(t testing.TB, m *model.Transformer, accum int) (*step.Step, *step.State, *peft.Adapter, [][]float32) {
	t.Helper()
	a, err := peft.New(peft.Config{Method: peft.LoRA, Rank: 2, Alpha: 4, Targets: []string{"attn"}}, m.Specs)
	if err != nil {
		t.Fatal(err)
	}
	opt, err := optim.New("adamw", AdapterOptimizerParams(a), optim.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	base, err := m.Init(1)
	if err != nil {
		t.Fatal(err)
	}
	ad, err := a.Init(2, base)
	if err != nil {
		t.Fatal(err)
	}
	optState, err := opt.Init()
	if err != nil {
		t.Fatal(err)
	}
	s, err := step.NewStep(adapterLoss(m, a), opt, step.Layout{Trainable: len(ad), Frozen: len(base), State: len(optState), Inputs: step.WeightedInputs}, step.StepOptions{Accum: accum, GradClip: 1, Compile: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Free)
	baseVals := make([][]float32, len(base))
	for i, b := range base {
		if baseVals[i], err = b.Float32s(); err != nil {
			t.Fatal(err)
		}
	}
	st, err := step.NewFrozenState(s, ad, base, optState)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Free)
	return s, st, a, baseVals
}

// A LoRA fine-tune updates the adapter tensors and nothing else: the base
// weights come out bit for bit as they went in, the optimizer keeps state
// for the adapters alone, and the B factors, zero at first, have moved.
// With a cosine schedule and 4 accumulated microbatches it traces once.
func TestLoRAChangesOnlyAdaptersAndTracesOnce(t *testing.T) {
	m, xs, ys, ws := weightedFixture(t)
	mlxtest.Run(t, func(t testing.TB) {
		s, st, a, baseVals := loraSetup(t, m, 4)
		if got, want := len(st.OptState()), 1+2*len(a.Specs); got != want {
			t.Errorf("AdamW keeps %d state arrays, want %d (step + m, v per adapter array)", got, want)
		}
		sched, err := optim.NewSchedule("cosine", 1e-2, 1e-3, 2, 6, 0)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 6; i++ {
			if _, err := st.Update(sched.LR(i), step.Batch{X: xs, Y: ys, W: ws, N: 4, B: 1, T: 6}); err != nil {
				t.Fatal(err)
			}
		}
		if s.Traces() != 1 {
			t.Errorf("traced %d times over 6 cosine updates with accum 4, want 1", s.Traces())
		}
		for i, b := range st.Frozen() {
			got, err := b.Float32s()
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, baseVals[i]) {
				t.Errorf("base weight %s changed", m.Specs[i].Name)
			}
		}
		for j, spec := range a.Specs {
			if j%2 == 0 {
				continue // A starts random; B starts at zero
			}
			v, err := st.Params()[j].Float32s()
			if err != nil {
				t.Fatal(err)
			}
			if slices.Max(v) == 0 && slices.Min(v) == 0 {
				t.Errorf("adapter %s is still zero after 6 updates", spec.Name)
			}
		}
	})
}
