package train

import (
	"fmt"
	"math"
	"runtime"
	"testing"

	"github.com/posttrainllm/posttrainllm/data"
	"github.com/posttrainllm/posttrainllm/internal/mlxtest"
	"github.com/posttrainllm/posttrainllm/internal/runtest/fixture"
	"github.com/posttrainllm/posttrainllm/mlx"
	"github.com/posttrainllm/posttrainllm/model"
	"github.com/posttrainllm/posttrainllm/step"
)

// orderings are what microbatch i can wait for (StepOptions.dependsOn,
// given every accumulated gradient and then the loss): the step's own
// choice, all of it, first; then nothing, the unbounded formulation; then
// less. The orderings after the first pick among per-parameter
// gradients, so accumPeak runs them with the optimizer per parameter
// (not over the flat layout, whose accumulator is one array).
var orderings = []struct {
	name      string
	dependsOn func([]*mlx.Array) []*mlx.Array
}{
	{"grads-and-loss", nil},
	{"unordered", func([]*mlx.Array) []*mlx.Array { return nil }},
	{"grads", func(acc []*mlx.Array) []*mlx.Array { return acc[:len(acc)-1] }},
	{"matrix-grads", func(acc []*mlx.Array) []*mlx.Array {
		var out []*mlx.Array
		for _, a := range acc {
			if a.Ndim() == 2 {
				out = append(out, a)
			}
		}
		return out
	}},
	{"embedding-grad", func(acc []*mlx.Array) []*mlx.Array { return acc[:1] }},
}

// memoryConfig is an AdamW run of batch 8 at the small preset's width and
// depth (d_model 128, 4 layers) and the given context, on the CPU.
func memoryConfig(context, accum int, compile bool) Config {
	return Config{
		Model:     model.Config{VocabSize: 256, DModel: 128, Layers: 4, Heads: 4, Context: context},
		Tokenizer: "byte", Steps: 3, Batch: 8, Accum: accum,
		Optimizer: "adamw", Schedule: "cosine", LR: 2e-3, MinLR: 2e-4, Warmup: 1,
		GradClip: 1, Compile: compile, Device: "cpu", Seed: 1, LogEvery: 1, EvalTokens: 8 * context,
	}
}

// accumPeak runs cfg.Steps updates of a fresh state of cfg, whose step
// orders its microbatches with dependsOn, and returns MLX's peak memory
// over the last update (parameters and optimizer state included, as in
// training) and that update's loss.
func accumPeak(t testing.TB, cfg Config, dependsOn func([]*mlx.Array) []*mlx.Array) (peak uint64, loss float64) {
	t.Helper()
	cfg, m, err := Prepare(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ds := memoryDataset(t, fixture.SyntheticText(100_000), cfg.Model.Context)
	mlxtest.Run(t, func(t testing.TB) {
		opt, err := NewOptimizer(cfg, m.Specs)
		if err != nil {
			t.Fatal(err)
		}
		if dependsOn != nil {
			opt = perParameter{opt}
		}
		opts := RunStepOptions(cfg)
		opts.DependsOn = dependsOn
		upd, err := step.NewStep(step.MeanLoss(m.Loss), opt, step.Layout{Trainable: len(m.Specs), State: len(opt.StateNames())}, opts)
		if err != nil {
			t.Fatal(err)
		}
		defer upd.Free()
		st, err := step.InitState(upd, m, cfg.Seed)
		if err != nil {
			t.Fatal(err)
		}
		defer st.Free()
		sampler, err := data.NewSampler(ds.Train, cfg.Model.Context, cfg.Seed)
		if err != nil {
			t.Fatal(err)
		}
		b, err := data.NewBatch(cfg.Accum, cfg.Batch, cfg.Model.Context)
		if err != nil {
			t.Fatal(err)
		}
		// What earlier tests left for the collector would count in the peak.
		runtime.GC()
		mlx.ClearCache()
		for i := 0; i < cfg.Steps; i++ {
			if err := sampler.FillBatch(b); err != nil {
				t.Fatal(err)
			}
			if i == cfg.Steps-1 {
				mlx.ResetPeakMemory()
			}
			if loss, err = st.Update(1e-3, step.BatchOf(b)); err != nil {
				t.Fatal(err)
			}
			if err := st.Eval(); err != nil {
				t.Fatal(err)
			}
		}
		peak = mlx.Memory().Peak
	})
	mlx.Do(func() error { mlx.ClearCache(); return nil })
	return peak, loss
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }

// Accumulating 8 microbatches of 8 sequences peaks within 1.15 × the peak
// of one microbatch plus one float32 copy of the parameters (the
// accumulators), compiled and interpreted. The unordered formulation of the
// same step must break that bound, or this test could not tell.
func TestAccumulationBoundsMemory(t *testing.T) {
	const context, accum = 64, 8
	paramBytes := uint64(memoryConfig(context, 1, true).Model.WithDefaults().ParamCount()) * 4
	for _, compile := range []bool{true, false} {
		one, _ := accumPeak(t, memoryConfig(context, 1, compile), nil)
		bound := 1.15*float64(one) + float64(paramBytes)
		many, _ := accumPeak(t, memoryConfig(context, accum, compile), nil)
		t.Logf("compile=%t: batch 8 × accum 1 peaks at %.1f MiB, × accum %d at %.1f MiB; bound %.1f MiB",
			compile, mib(one), accum, mib(many), bound/(1<<20))
		if float64(many) > bound {
			t.Errorf("compile=%t: batch 8 × accum %d peaks at %.1f MiB, over 1.15 × %.1f MiB (accum 1) + %.1f MiB of float32 parameters = %.1f MiB",
				compile, accum, mib(many), mib(one), mib(paramBytes), bound/(1<<20))
		}
		if compile {
			unordered, _ := accumPeak(t, memoryConfig(context, accum, compile), orderings[1].dependsOn)
			t.Logf("compile=%t: unordered, accum %d peaks at %.1f MiB", compile, accum, mib(unordered))
			if float64(unordered) <= bound {
				t.Errorf("the unordered step peaks at %.1f MiB, within the bound of %.1f MiB too: this model is too small for the test to tell",
					mib(unordered), bound/(1<<20))
			}
		}
	}
}

// Ordering the microbatches changes when they run, not what they compute:
// one update with and without the ordering gives the same parameters,
// compiled and interpreted.
func TestOrderedAccumulationMatchesUnordered(t *testing.T) {
	mlxtest.Run(t, func(t testing.TB) {
		m, params, xs, ys := stepSetup(t)
		for _, compile := range []bool{true, false} {
			var got [2][]float32
			var losses [2]float64
			for k, dependsOn := range []func([]*mlx.Array) []*mlx.Array{nil, orderings[1].dependsOn} {
				opt := plainSGD(t, m)
				state, _ := opt.Init()
				s, err := step.NewStep(step.MeanLoss(m.Loss), opt, step.Layout{Trainable: len(m.Specs), State: len(state)}, step.StepOptions{Accum: 4, Compile: compile, DependsOn: dependsOn})
				if err != nil {
					t.Fatal(err)
				}
				res, err := s.Run(params, state, mlx.Scalar(0.5, mlx.Float32),
					mlx.FromSlice(xs, 4, 4, 16), mlx.FromSlice(ys, 4, 4, 16))
				if err != nil {
					t.Fatal(err)
				}
				flat := make([]*mlx.Array, len(res.Params))
				for i, p := range res.Params {
					flat[i] = mlx.Reshape(mlx.Subtract(p, params[i]), -1)
				}
				if got[k], err = mlx.Concatenate(flat, 0).Float32s(); err != nil {
					t.Fatal(err)
				}
				if losses[k], err = res.Loss.Item(); err != nil {
					t.Fatal(err)
				}
				s.Free()
			}
			var maxDiff, maxAbs float64
			for i := range got[0] {
				maxDiff = math.Max(maxDiff, math.Abs(float64(got[0][i]-got[1][i])))
				maxAbs = math.Max(maxAbs, math.Abs(float64(got[1][i])))
			}
			if maxAbs == 0 {
				t.Fatal("the update is zero; the test cannot tell anything")
			}
			if maxDiff > 1e-6*maxAbs || losses[0] != losses[1] {
				t.Fatalf("compile=%t: ordered and unordered updates differ by up to %g (largest change %g), losses %.7f and %.7f",
					compile, maxDiff, maxAbs, losses[0], losses[1])
			}
		}
	})
}

// BenchmarkAccumulationMemory measures the peak memory of one update of
// the small preset's model (batch 8, context 128) for accum 1, 4 and 8,
// compiled and interpreted, under each ordering of the microbatches. It
// reports peak-MiB and the update's loss (equal across orderings); the
// times are one update's, noise on a shared machine. docs/performance/cpu.md
// has the table and the command.
func BenchmarkAccumulationMemory(b *testing.B) {
	for _, compile := range []bool{true, false} {
		for _, accum := range []int{1, 4, 8} {
			for _, o := range orderings {
				if accum == 1 && o.dependsOn != nil {
					continue // one microbatch: nothing to order
				}
				name := fmt.Sprintf("compile=%t/accum=%d/%s", compile, accum, o.name)
				b.Run(name, func(b *testing.B) {
					var peak uint64
					var loss float64
					for range b.N {
						peak, loss = accumPeak(b, memoryConfig(128, accum, compile), o.dependsOn)
					}
					b.ReportMetric(mib(peak), "peak-MiB")
					b.ReportMetric(loss, "loss")
				})
			}
		}
	}
}
