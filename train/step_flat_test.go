package train

import (
	"slices"
	"testing"

	"github.com/posttrainllm/posttrainllm/internal/mlxtest"
	"github.com/posttrainllm/posttrainllm/internal/runtest/fixture"
	"github.com/posttrainllm/posttrainllm/mlx"
	"github.com/posttrainllm/posttrainllm/model"
	"github.com/posttrainllm/posttrainllm/optim"
	"github.com/posttrainllm/posttrainllm/step"
)

// perParameter hides an optimizer's Elementwise methods, so a step runs
// it per parameter: the layout the flat one must agree with.
type perParameter struct{ optim.Optimizer }

// flatRun is a State of a compiled step of an elementwise optimizer over
// m (accum 2, clipping, compute-dtype copies where m computes in bf16).
func flatRun(t testing.TB, m *model.Transformer, name string, flat bool) (*step.Step, *step.State) {
	t.Helper()
	oc := optim.DefaultConfig()
	oc.SGD.Momentum, oc.SGD.WeightDecay = 0.9, 0.01
	opt, err := optim.New(name, OptimizerParams(m.Specs), oc)
	if err != nil {
		t.Fatal(err)
	}
	if !flat {
		opt = perParameter{opt}
	}
	opts := RunStepOptions(Config{Model: m.Config, Accum: copiesAccum, GradClip: 0.5, Compile: true})
	upd, err := step.NewStep(step.MeanLoss(m.Loss), opt, step.Layout{Trainable: len(m.Specs), State: len(opt.StateNames())}, opts)
	if err != nil {
		t.Fatal(err)
	}
	state, err := step.InitState(upd, m, copiesSeed)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		state.Free()
		upd.Free()
	})
	return upd, state
}

// An elementwise optimizer over the flat layout computes what it computes
// per parameter: the same losses, gradient norms, parameters and optimizer
// state (as per-parameter views, in the same order) after three updates,
// with accumulation and clipping. (In float32: with bf16 copies a
// last-bit difference of the gradient norm, whose sum runs in another
// order, can round a copy the other way and grow from there.)
func TestFlatLayoutMatchesPerParameter(t *testing.T) {
	mlxtest.Run(t, func(t testing.TB) {
		ds := memoryDataset(t, fixture.SyntheticText(20_000), copiesT)
		m, err := model.New(model.Config{VocabSize: 256, DModel: 32, Layers: 2, Heads: 2, Context: copiesT})
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{"adamw", "lion", "sgd"} {
			var states [2]*step.State
			var stats [2][]step.StepStats
			for k, flat := range []bool{true, false} {
				upd, state := flatRun(t, m, name, flat)
				if (upd.FlatGroups() > 0) != flat {
					t.Fatalf("%s: flat layout %v, want %v", name, upd.FlatGroups() > 0, flat)
				}
				for i := 0; i < 3; i++ {
					if _, err := state.Update(1e-2, copiesBatch(ds, i)); err != nil {
						t.Fatal(err)
					}
					st, err := state.Stats()
					if err != nil {
						t.Fatal(err)
					}
					stats[k] = append(stats[k], st)
				}
				if upd.Traces() != 1 {
					t.Errorf("%s flat=%v: %d traces, want 1", name, flat, upd.Traces())
				}
				states[k] = state
			}
			for i := range stats[0] {
				if d := stats[0][i].Loss - stats[1][i].Loss; d*d > 1e-10 {
					t.Errorf("%s update %d: loss %v flat, %v per parameter", name, i, stats[0][i].Loss, stats[1][i].Loss)
				}
				if d := stats[0][i].GradNorm - stats[1][i].GradNorm; d*d > 1e-10*stats[1][i].GradNorm*stats[1][i].GradNorm {
					t.Errorf("%s update %d: grad norm %v flat, %v per parameter", name, i, stats[0][i].GradNorm, stats[1][i].GradNorm)
				}
			}
			if len(states[0].Params()) != len(states[1].Params()) || len(states[0].OptState()) != len(states[1].OptState()) {
				t.Fatalf("%s: flat state has %d params and %d optimizer arrays, per parameter %d and %d", name,
					len(states[0].Params()), len(states[0].OptState()), len(states[1].Params()), len(states[1].OptState()))
			}
			for i, p := range states[0].Params() {
				if !sameShape(p, states[1].Params()[i]) {
					t.Fatalf("%s: param %d is %v flat, %v per parameter", name, i, p.Shape(), states[1].Params()[i].Shape())
				}
			}
			// The norm sums the gradients in another order (the flat
			// layout's groups); AdamW's division by √v carries that last
			// bit into elements with tiny gradients, by up to 1e-5 of the
			// learning rate here, and the next update's gradients carry
			// the parameters' difference into the moments: near zero they
			// match to the scale of their array, not their own.
			assertWithin(t, name+" params", states[0].Params(), states[1].Params(), 1e-5, 1e-7)
			assertNear(t, name+" optimizer state", states[0].OptState()[1:], states[1].OptState()[1:], 1e-5)
			if a, b := states[0].OptState()[0], states[1].OptState()[0]; a.Dtype() != mlx.Int32 || !equalItems(t, a, b) {
				t.Errorf("%s: update counters differ", name)
			}
		}
	})
}

func sameShape(a, b *mlx.Array) bool {
	return slices.Equal(a.Shape(), b.Shape()) && a.Dtype() == b.Dtype()
}

func equalItems(t testing.TB, a, b *mlx.Array) bool {
	t.Helper()
	x, err := a.Item()
	if err != nil {
		t.Fatal(err)
	}
	y, err := b.Item()
	if err != nil {
		t.Fatal(err)
	}
	return x == y
}

// The flat layout is there to run fewer operations per update: one
// optimizer update per group instead of one per parameter, and one cast
// or accumulation of all gradients instead of one per parameter (views, which
// launch no kernel, not counted).
func TestFlatLayoutRunsFewerOperations(t *testing.T) {
	mlxtest.Run(t, func(t testing.TB) {
		ds := memoryDataset(t, fixture.SyntheticText(20_000), copiesT)
		var total [2]int
		var groups int
		for k, flat := range []bool{true, false} {
			upd, state := flatRun(t, mixedModel(t), "adamw", flat)
			if _, err := state.Update(1e-2, copiesBatch(ds, 0)); err != nil {
				t.Fatal(err)
			}
			if err := state.Apply(1e-2, copiesBatch(ds, 1)); err != nil {
				t.Fatal(err)
			}
			ops, err := state.GraphOps()
			if err != nil {
				t.Fatal(err)
			}
			total[k] = mlx.CountKernelOps(ops)
			if flat {
				groups = upd.FlatGroups()
			}
		}
		params := len(mixedModel(t).Specs)
		t.Logf("graph ops per update: flat %d (%d groups), per parameter %d (%d params)", total[0], groups, total[1], params)
		if total[0] > total[1]-2*(params-groups) {
			t.Errorf("flat update has %d graph ops, per parameter %d: want at least two fewer per parameter beyond the %d groups (its update, and its cast or accumulation)",
				total[0], total[1], groups)
		}
	})
}

// Each layer's q/k/v weights passed stacked (StepOptions.StackedParams,
// a view of the flat layout differentiated as one array) give the updates
// of the three passed apart; on the CPU the model splits the stacked view
// into three matmuls, on a GPU it runs one.
func TestStackedParamsMatchSeparate(t *testing.T) {
	mlxtest.Run(t, func(t testing.TB) {
		ds := memoryDataset(t, fixture.SyntheticText(20_000), copiesT)
		m, err := model.New(model.Config{VocabSize: 256, DModel: 32, Layers: 2, Heads: 4, KVHeads: 2, Context: copiesT})
		if err != nil {
			t.Fatal(err)
		}
		var states [2]*step.State
		var losses [2][]float64
		for k, stacked := range [][][]int{m.Config.QKVRuns(), nil} {
			opt, err := optim.New("adamw", OptimizerParams(m.Specs), optim.DefaultConfig())
			if err != nil {
				t.Fatal(err)
			}
			opts := step.StepOptions{Accum: 2, GradClip: 0.5, Compile: true, StackedParams: stacked}
			upd, err := step.NewStep(step.MeanLoss(m.Loss), opt, step.Layout{Trainable: len(m.Specs), State: len(opt.StateNames())}, opts)
			if err != nil {
				t.Fatal(err)
			}
			defer upd.Free()
			st, err := step.InitState(upd, m, copiesSeed)
			if err != nil {
				t.Fatal(err)
			}
			defer st.Free()
			for i := 0; i < 3; i++ {
				loss, err := st.Update(1e-2, copiesBatch(ds, i))
				if err != nil {
					t.Fatal(err)
				}
				losses[k] = append(losses[k], loss)
			}
			if want := len(m.Specs) - 2*len(stacked); upd.Differentiated() != want {
				t.Fatalf("stacked=%v: the step differentiates %d arrays, want %d", stacked != nil, upd.Differentiated(), want)
			}
			states[k] = st
		}
		for i := range losses[0] {
			if d := losses[0][i] - losses[1][i]; d*d > 1e-12 {
				t.Errorf("update %d: loss %v stacked, %v separate", i, losses[0][i], losses[1][i])
			}
		}
		assertWithin(t, "params", states[0].Params(), states[1].Params(), 1e-5, 1e-7)
	})
}
