package finetune

import (
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/posttrainllm/posttrainllm/data"
	"github.com/posttrainllm/posttrainllm/internal/mlxtest"
	"github.com/posttrainllm/posttrainllm/mlx"
	"github.com/posttrainllm/posttrainllm/model"
	"github.com/posttrainllm/posttrainllm/optim"
	"github.com/posttrainllm/posttrainllm/peft"
	"github.com/posttrainllm/posttrainllm/step"
)

// randomAdapter is adapter arrays for a over base with every factor
// random, B included, so the adapters change the model's outputs.
func randomAdapter(t testing.TB, a *peft.Adapter, base []*mlx.Array) []*mlx.Array {
	t.Helper()
	ad, err := a.Init(4, base)
	if err != nil {
		t.Fatal(err)
	}
	for j, s := range a.Specs {
		if strings.HasSuffix(s.Name, ".lora_B") { // zero at init
			ad[j] = mlx.RandomNormal(s.Shape, mlx.Float32, 0, 0.5, mlx.RandomKey(uint64(j)))
		}
	}
	return ad
}

// The adapter-off reference is the base model: its log-probabilities
// equal, bit for bit, those of the plain model on the base weights, while
// the adapted model's differ.
func TestAdapterReferenceIsBaseModel(t *testing.T) {
	m, xs, ys, mask := prefFixture(t)
	mlxtest.Run(t, func(t testing.TB) {
		base, err := m.Init(1)
		if err != nil {
			t.Fatal(err)
		}
		x, y, mk := mlx.FromSlice(xs, 8, 6), mlx.FromSlice(ys, 8, 6), mlx.FromSlice(mask, 8, 6)
		ce, _ := m.LossTerms(base, x, y)
		want, err := mlx.Negative(mlx.Sum(mlx.Multiply(ce, mk), -1)).Float32s()
		if err != nil {
			t.Fatal(err)
		}
		for _, method := range []peft.Method{peft.LoRA, peft.DoRA} {
			a, err := peft.New(peft.Config{Method: method, Rank: 2, Alpha: 4, Targets: []string{"attn", "mlp"}}, m.Specs)
			if err != nil {
				t.Fatal(err)
			}
			ad := randomAdapter(t, a, base)
			got, err := AdapterReferenceLogProbs(m, a, base, x, y, mk).Float32s()
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, want) {
				t.Errorf("%s: adapter-off log-probabilities %v, base model's %v", method, got, want)
			}
			ace, _ := AdapterTerms(m, a, ad, base, x, y)
			adapted, _ := SequenceLogProbs(ace, mk)
			av, _ := adapted.Float32s()
			if slices.Equal(av, want) {
				t.Errorf("%s: the adapted model's log-probabilities equal the base's; the test adapters change nothing", method)
			}
		}
	})
}

// adapterDPOState is the compiled adapter DPO row step of these tests (β
// 0.5, accumulation 2, clipping at 1, AdamW) over base with adapters ad,
// and its state; both are freed when the test ends.
func adapterDPOState(t testing.TB, m *model.Transformer, a *peft.Adapter, base, ad []*mlx.Array) (*step.Step, *step.State) {
	t.Helper()
	opt, err := optim.New("adamw", AdapterOptimizerParams(a), optim.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	optState, err := opt.Init()
	if err != nil {
		t.Fatal(err)
	}
	s, err := step.NewStep(AdapterPreferenceLoss(m, a, Preference{Objective: DPO, Beta: 0.5}), opt, step.Layout{Trainable: len(ad), Frozen: len(base), State: len(optState), Inputs: step.RowInputs, RowInputs: 0, Aux: PreferenceAux}, step.StepOptions{Accum: 2, GradClip: 1, Compile: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Free)
	st, err := step.NewFrozenState(s, ad, base, optState)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Free)
	return s, st
}

// rowBatch is the fixture as a row step's batch of n microbatches.
func rowBatch(xs, ys []int32, mask []float32, n int, ref []float32) step.Batch {
	b := step.Batch{X: xs, Y: ys, W: mask, RowW: pairWeights(8), N: n, B: 8 / n, T: 6}
	if ref != nil {
		b.RowInputs = [][]float32{ref}
	}
	return b
}

// A fresh adapter is the base model, so DPO starts at loss ln 2 with
// every reward and margin exactly 0 and every pair tied; training
// moves the rewards apart, tracing the step once.
func TestFreshAdapterDPOStartsAtLn2(t *testing.T) {
	m, xs, ys, mask := prefFixture(t)
	mlxtest.Run(t, func(t testing.TB) {
		for _, method := range []peft.Method{peft.LoRA, peft.DoRA} {
			a, err := peft.New(peft.Config{Method: method, Rank: 2, Alpha: 4, Targets: []string{"attn", "mlp"}}, m.Specs)
			if err != nil {
				t.Fatal(err)
			}
			base, _ := m.Init(1)
			ad, err := a.Init(2, base)
			if err != nil {
				t.Fatal(err)
			}
			s, st := adapterDPOState(t, m, a, base, ad)
			loss, err := st.Update(1e-2, rowBatch(xs, ys, mask, 2, nil))
			if err != nil {
				t.Fatal(err)
			}
			if math.Abs(loss-math.Ln2) > 1e-6 {
				t.Errorf("%s: first DPO loss %.8g, want ln 2 = %.8g", method, loss, math.Ln2)
			}
			stats, _ := st.Stats()
			if !slices.Equal(stats.Aux, []float64{0, 0, 0, 0.5}) {
				t.Errorf("%s: first update's %v = %v, want 0, 0, 0 and every pair tied (accuracy ½)", method, PreferenceAux, stats.Aux)
			}
			// The gradient at margin 0 is −β/2·∇(πc − πr), not zero.
			if stats.GradNorm == 0 {
				t.Errorf("%s: zero gradient at the fresh adapter", method)
			}
			for i := 0; i < 5; i++ {
				if loss, err = st.Update(1e-2, rowBatch(xs, ys, mask, 2, nil)); err != nil {
					t.Fatal(err)
				}
			}
			stats, _ = st.Stats()
			if loss >= math.Ln2 || stats.Aux[2] <= 0 {
				t.Errorf("%s: after 6 updates on the same pairs, loss %g and margin %g; want below ln 2 and above 0", method, loss, stats.Aux[2])
			}
			if s.Traces() != 1 {
				t.Errorf("%s: traced %d times over 6 updates, want 1", method, s.Traces())
			}
		}
	})
}

// fullDPOStep is a full fine-tune's DPO row step with plain SGD and
// precomputed reference log-probabilities as its row input.
func fullDPOStep(t testing.TB, m *model.Transformer, accum int, clip float64) (*step.Step, []*mlx.Array) {
	t.Helper()
	return sgdStep(t, m, PreferenceLoss(m, Preference{Objective: DPO, Beta: 0.5}),
		step.Layout{Inputs: step.RowInputs, RowInputs: 1, Aux: PreferenceAux}, step.StepOptions{Accum: accum, GradClip: clip, Compile: true})
}

// A row step's loss and metrics are means over the update's pairs,
// whatever the split into microbatches: the same loss, metrics and
// update for 1, 2 or 4 microbatches, clipped or not, equal to the mean of
// the per-pair losses computed on the host from the model's
// log-probabilities. A WeightSum of twice the pairs (another rank's as
// many) halves the loss, as the sum over ranks then is the union's mean.
func TestRowStepIsPairMeanWhateverTheSplit(t *testing.T) {
	m, xs, ys, mask := prefFixture(t)
	ref := []float32{-20, -21, -19.5, -22, -18, -20.5, -21, -19}
	mlxtest.Run(t, func(t testing.TB) {
		params, err := m.Init(1)
		if err != nil {
			t.Fatal(err)
		}
		ce, _ := m.LossTerms(params, mlx.FromSlice(xs, 8, 6), mlx.FromSlice(ys, 8, 6))
		lp, _ := SequenceLogProbs(ce, mlx.FromSlice(mask, 8, 6))
		logp, _ := lp.Float32s()
		w := make([]float64, 8)
		for i := 0; i < 8; i += 2 {
			w[i] = 0.25
		}
		p := Preference{Objective: DPO, Beta: 0.5}
		want, wantAux := hostPairLoss(p, f64(logp), nil, f64(ref), w)
		for _, clip := range []float64{0, 0.05} {
			var first []float32
			for _, accum := range []int{1, 2, 4} {
				s, state := fullDPOStep(t, m, accum, clip)
				b := rowBatch(xs, ys, mask, accum, ref)
				rw, total := hostNormalize(b.RowW)
				if total != 4 {
					t.Fatalf("row weights total %g, want 4 pairs", total)
				}
				B := 8 / accum
				res, err := s.RunRows(params, nil, state, mlx.Scalar(0.5, mlx.Float32), mlx.FromSlice(xs, accum, B, 6), mlx.FromSlice(ys, accum, B, 6),
					mlx.FromSlice(mask, accum, B, 6), mlx.FromSlice(rw, accum, B), mlx.FromSlice(ref, accum, B))
				if err != nil {
					t.Fatal(err)
				}
				got, _ := res.Loss.Item()
				if math.Abs(got-want) > 1e-5 {
					t.Errorf("accum %d clip %g: loss %.7g, host mean over pairs %.7g", accum, clip, got, want)
				}
				for k, a := range res.Aux {
					v, _ := a.Item()
					if math.Abs(v-wantAux[k]) > 1e-5 {
						t.Errorf("accum %d: %s %.7g, host %.7g", accum, PreferenceAux[k], v, wantAux[k])
					}
				}
				delta, _ := mlx.Subtract(res.Params[1], params[1]).Float32s()
				if first == nil {
					first = delta
					if slices.Max(delta) == 0 && slices.Min(delta) == 0 {
						t.Fatal("the update did not change the parameters")
					}
					continue
				}
				for i := range delta {
					if math.Abs(float64(delta[i]-first[i])) > 1e-6 {
						t.Fatalf("accum %d clip %g: update differs from accum 1 at %d: %g vs %g", accum, clip, i, delta[i], first[i])
					}
				}
			}
		}
		s, state := fullDPOStep(t, m, 2, 0)
		copies := make([]*mlx.Array, len(params))
		for i, p := range params {
			copies[i] = mlx.Copy(p)
		}
		st, err := step.NewState(s, copies, state)
		if err != nil {
			t.Fatal(err)
		}
		defer st.Free()
		b := rowBatch(xs, ys, mask, 2, ref)
		b.WeightSum = 8
		half, err := st.Update(0, b)
		if err != nil {
			t.Fatal(err)
		}
		if math.Abs(half-want/2) > 1e-5 {
			t.Errorf("loss with WeightSum of twice the pairs %.7g, want half the mean, %.7g", half, want/2)
		}
		b.WeightSum = 0
		if _, err := st.Update(0, b); err != nil {
			t.Fatal(err)
		}
		mean, pairs, updates, err := st.IntervalLoss()
		if err != nil {
			t.Fatal(err)
		}
		// Two updates of weight 8 and 4: (8·want/2 + 4·want) / 12.
		if pairs != 12 || updates != 2 || math.Abs(mean-want*2/3) > 1e-5 {
			t.Errorf("interval mean %.7g over %g pairs and %d updates, want %.7g over 12 and 2", mean, pairs, updates, want*2/3)
		}
		if aux := st.IntervalAux(); len(aux) != 4 || math.Abs(aux[3]-wantAux[3]*2/3) > 1e-6 {
			t.Errorf("interval metrics %v, want accuracy %g", aux, wantAux[3]*2/3)
		}
		bad := rowBatch(xs, ys, mask, 2, nil)
		if _, err := st.Update(0, bad); err == nil {
			t.Error("a row step accepted a batch without its reference row input")
		}
		bad = rowBatch(xs, ys, mask, 2, ref)
		bad.RowW = nil
		if _, err := st.Update(0, bad); err == nil {
			t.Error("a row step accepted a batch without row weights")
		}
	})
}

// The reference log-probabilities computed once over rows (padded last
// batch, compiled) equal the adapter-off ones computed inside the step,
// and a full DPO step fed them at the base weights starts at ln 2.
func TestPrecomputedReferenceMatchesOnTheFly(t *testing.T) {
	m, xs, ys, mask := prefFixture(t)
	mlxtest.Run(t, func(t testing.TB) {
		base, err := m.Init(1)
		if err != nil {
			t.Fatal(err)
		}
		rows := &data.Rows{T: 6, X: xs, Y: ys, W: mask, Pairs: true}
		pre, err := ReferenceLogProbs(m.LossTerms, base, rows, 3, true)
		if err != nil {
			t.Fatal(err)
		}
		a, err := peft.New(peft.Config{Method: peft.LoRA, Rank: 2, Alpha: 4, Targets: []string{"attn"}}, m.Specs)
		if err != nil {
			t.Fatal(err)
		}
		fly, err := AdapterReferenceLogProbs(m, a, base, mlx.FromSlice(xs, 8, 6), mlx.FromSlice(ys, 8, 6), mlx.FromSlice(mask, 8, 6)).Float32s()
		if err != nil {
			t.Fatal(err)
		}
		for i := range fly {
			if math.Abs(float64(pre[i]-fly[i])) > 1e-5*math.Abs(float64(fly[i])) {
				t.Errorf("row %d: precomputed reference %.7g, on the fly %.7g", i, pre[i], fly[i])
			}
		}
		s, state := fullDPOStep(t, m, 2, 0)
		st, err := step.NewState(s, base, state)
		if err != nil {
			t.Fatal(err)
		}
		defer st.Free()
		loss, err := st.Update(0, rowBatch(xs, ys, mask, 2, pre))
		if err != nil {
			t.Fatal(err)
		}
		if math.Abs(loss-math.Ln2) > 1e-6 {
			t.Errorf("full DPO at the reference's weights: loss %.8g, want ln 2", loss)
		}
	})
}

// Over a quantized base (QLoRA), the adapter-off reference is the
// quantized base: fresh adapters compute its log-probabilities bit for
// bit (DPO starts at ln 2 there too), trained ones do not.
func TestQuantizedAdapterReferenceIsQuantizedBase(t *testing.T) {
	_, xs, ys, mask := prefFixture(t)
	m, err := model.New(model.Config{VocabSize: 32, DModel: 64, Layers: 1, Heads: 2, Context: 6})
	if err != nil {
		t.Fatal(err)
	}
	mlxtest.Run(t, func(t testing.TB) {
		base, _ := m.Init(1)
		q, frozen, err := peft.QuantizeBase(m.Specs, base, 32, 4)
		if err != nil {
			t.Fatal(err)
		}
		x, y, mk := mlx.FromSlice(xs, 8, 6), mlx.FromSlice(ys, 8, 6), mlx.FromSlice(mask, 8, 6)
		for _, method := range []peft.Method{peft.LoRA, peft.DoRA} {
			a, err := peft.New(peft.Config{Method: method, Rank: 2, Alpha: 4, Targets: []string{"all"}}, m.Specs)
			if err != nil {
				t.Fatal(err)
			}
			a.Quant = q
			ref, err := AdapterReferenceLogProbs(m, a, frozen, x, y, mk).Float32s()
			if err != nil {
				t.Fatal(err)
			}
			fresh, err := a.Init(2, frozen)
			if err != nil {
				t.Fatal(err)
			}
			ce, _ := AdapterTerms(m, a, fresh, frozen, x, y)
			lp, _ := SequenceLogProbs(ce, mk)
			policy, err := lp.Float32s()
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(policy, ref) {
				t.Errorf("%s over a 4-bit base: fresh adapters' log-probabilities %v, the adapter-off reference's %v", method, policy, ref)
			}
			ce, _ = AdapterTerms(m, a, randomAdapter(t, a, frozen), frozen, x, y)
			lp, _ = SequenceLogProbs(ce, mk)
			if trained, _ := lp.Float32s(); slices.Equal(trained, ref) {
				t.Errorf("%s: trained adapters give the reference's log-probabilities", method)
			}
		}
	})
}

// The memory tools leave a preference step's numbers as they are:
// gradient checkpointing and the chunked loss give the losses, metrics
// and updated adapters of the plain step, the reference pass included.
func TestPreferenceStepWithMemoryTools(t *testing.T) {
	m, xs, ys, mask := prefFixture(t)
	mlxtest.Run(t, func(t testing.TB) {
		run := func(mem model.Memory) ([]float64, []float32) {
			m.Memory = mem
			defer func() { m.Memory = model.Memory{} }()
			a, _ := peft.New(peft.Config{Method: peft.LoRA, Rank: 2, Alpha: 4, Targets: []string{"attn", "mlp"}}, m.Specs)
			base, _ := m.Init(1)
			ad, _ := a.Init(2, base)
			_, st := adapterDPOState(t, m, a, base, ad)
			var vals []float64
			for i := 0; i < 3; i++ {
				loss, err := st.Update(1e-2, rowBatch(xs, ys, mask, 2, nil))
				if err != nil {
					t.Fatal(err)
				}
				stats, _ := st.Stats()
				vals = append(append(vals, loss), stats.Aux...)
			}
			b, err := st.Params()[1].Float32s()
			if err != nil {
				t.Fatal(err)
			}
			return vals, b
		}
		want, wantB := run(model.Memory{})
		got, gotB := run(model.Memory{Checkpoint: true, LossChunk: 5})
		for i := range want {
			if math.Abs(got[i]-want[i]) > 1e-5*math.Max(1, math.Abs(want[i])) {
				t.Errorf("value %d with checkpointing and a chunked loss: %.7g, plain %.7g", i, got[i], want[i])
			}
		}
		for i := range wantB {
			if math.Abs(float64(gotB[i]-wantB[i])) > 1e-5 {
				t.Fatalf("adapter value %d with the memory tools %g, plain %g", i, gotB[i], wantB[i])
			}
		}
	})
}
