package pretrain

import (
	"context"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"testing"

	"github.com/posttrainllm/posttrainllm/data"
	"github.com/posttrainllm/posttrainllm/generate"
	"github.com/posttrainllm/posttrainllm/internal/runtest"
	"github.com/posttrainllm/posttrainllm/internal/runtest/fixture"
	"github.com/posttrainllm/posttrainllm/mlx"
	"github.com/posttrainllm/posttrainllm/model"
	"github.com/posttrainllm/posttrainllm/step"
	"github.com/posttrainllm/posttrainllm/train"
)

// churn makes MLX callers land on many OS threads: it raises GOMAXPROCS to
// at least 4 and keeps the scheduler busy with goroutines that yield in a
// loop, until the test ends. It returns the set of threads fresh calls
// came from.
func churn(t *testing.T) *threadSet {
	t.Helper()
	prev := runtime.GOMAXPROCS(max(4, runtime.GOMAXPROCS(0)))
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
					runtime.Gosched()
				}
			}
		})
	}
	threads := &threadSet{tids: map[int]bool{}}
	t.Cleanup(func() {
		close(stop)
		wg.Wait()
		runtime.GOMAXPROCS(prev)
		t.Logf("MLX entry points called from %d OS threads", len(threads.tids))
		if len(threads.tids) < 2 && !t.Failed() {
			t.Errorf("every call came from one OS thread; the test did not move callers between threads")
		}
	})
	return threads
}

// threadSet records the OS threads callers ran on.
type threadSet struct {
	mu   sync.Mutex
	tids map[int]bool
}

// fresh runs fn(i) for i < n, each on a new goroutine that is locked to no
// thread and has done no MLX work, all at once, and returns the first
// error.
func (s *threadSet) fresh(n int, fn func(i int) error) error {
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			runtime.Gosched()
			s.mu.Lock()
			s.tids[osThreadID()] = true
			s.mu.Unlock()
			errs[i] = fn(i)
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// one runs fn on one fresh goroutine.
func (s *threadSet) one(fn func() error) error {
	return s.fresh(1, func(int) error { return fn() })
}

// Model initialisation, evaluation, sampling and checkpoints called from
// many fresh goroutines at once, while others keep the scheduler busy,
// give the results of the same calls made one at a time.
func TestEntryPointsFromManyGoroutines(t *testing.T) {
	threads := churn(t)
	const n = 8
	cfg := runtest.TinyConfig()
	cfg, m, err := train.Prepare(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ds := memoryDataset(t, fixture.SyntheticText(20_000), cfg.Model.Context)
	params, err := m.Init(7)
	if err != nil {
		t.Fatal(err)
	}
	defer mlx.Do(func() error { mlx.Free(params...); return nil })
	want := values(t, params[2])

	// Init: the same seed gives the same parameters on every goroutine.
	if err := threads.fresh(n, func(int) error {
		p, err := m.Init(7)
		if err != nil {
			return err
		}
		defer mlx.Do(func() error { mlx.Free(p...); return nil })
		if got := values(t, p[2]); !slices.Equal(got, want) {
			return errors.New("Init(7) gave other parameters than on the test goroutine")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	// The evaluator, built on one fresh goroutine and used from many.
	var eval *Evaluator
	if err := threads.one(func() (err error) {
		eval, err = NewEvaluator(m.LossTerms, ds.Val, cfg.Batch, cfg.Model.Context, 2*cfg.Batch*cfg.Model.Context, 3, true)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer eval.Free()
	wantEval, err := eval.Evaluate(params)
	if err != nil {
		t.Fatal(err)
	}
	wantLoss := wantEval.Loss
	if math.Abs(wantLoss-math.Log(256)) > 0.3 {
		t.Fatalf("held-out loss of fresh parameters %.4f, want about ln 256", wantLoss)
	}
	if err := threads.fresh(n, func(int) error {
		if got, err := eval.Evaluate(params); err != nil || got.Loss != wantLoss {
			return fmt.Errorf("evaluator: loss %v (%v), want %v", got.Loss, err, wantLoss)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	// Generation, and generation from a checkpoint saved and loaded on
	// fresh goroutines.
	opts := generate.Options{Sampling: generate.Sampling{MaxTokens: 12, Temperature: 1, TopK: 8, Seed: 4}}
	prompt := []int32{10, 20, 30}
	wantText, err := generateTokens(m, params, prompt, opts)
	if err != nil {
		t.Fatal(err)
	}
	opt, err := train.NewOptimizer(cfg, m.Specs)
	if err != nil {
		t.Fatal(err)
	}
	names := make([]string, len(m.Specs))
	for i, s := range m.Specs {
		names[i] = s.Name
	}
	var dir string
	if err := threads.one(func() error {
		// optim leaves handing its work to the MLX thread to its callers.
		var state []*mlx.Array
		if err := mlx.Do(func() (err error) { state, err = opt.Init(); return err }); err != nil {
			return err
		}
		defer mlx.Do(func() error { mlx.Free(state...); return nil })
		dir, err = train.SaveCheckpoint(filepath.Join(t.TempDir(), "checkpoints"), train.RunState{Step: 3, Config: cfg},
			names, params, opt.StateNames(), state)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if err := threads.fresh(n, func(i int) error {
		if i%2 == 0 {
			return sameTokens("Generate", wantText)(generateTokens(m, params, prompt, opts))
		}
		ck, err := train.LoadCheckpoint(dir)
		if err != nil {
			return err
		}
		defer ck.Free()
		loaded, err := ck.OrderedParams(m)
		if err != nil {
			return err
		}
		return sameTokens("Generate from the checkpoint", wantText)(generateTokens(m, loaded, prompt, opts))
	}); err != nil {
		t.Fatal(err)
	}
}

// generateTokens extends prompt by opts.MaxTokens tokens and returns the
// prompt and the tokens, as runfolder.Generate does.
func generateTokens(m *model.Transformer, params []*mlx.Array, prompt []int32, opts generate.Options) ([]int32, error) {
	out, _, err := generate.Tokens(context.Background(), m, params, prompt, opts, nil)
	if err != nil {
		return nil, err
	}
	return append(slices.Clone(prompt), out...), nil
}

// sameTokens checks a Generate result against want.
func sameTokens(what string, want []int32) func([]int32, error) error {
	return func(got []int32, err error) error {
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		if !slices.Equal(got, want) {
			return fmt.Errorf("%s: %v, want %v", what, got, want)
		}
		return nil
	}
}

// values reads a as float32s on the MLX thread.
func values(t testing.TB, a *mlx.Array) []float32 {
	var v []float32
	if err := mlx.Do(func() (err error) { v, err = a.Float32s(); return err }); err != nil {
		t.Error(err)
	}
	return v
}

// Training driven from fresh goroutines, while others keep the scheduler
// busy: three States updated at once, each update from a new goroutine, a
// bare Step.Run and a short Trainer.Run all give the losses of the same
// updates made from the test's goroutine, and every compiled step traces
// exactly once.
func TestTrainingFromManyGoroutines(t *testing.T) {
	threads := churn(t)
	cfg := runtest.TinyConfig()
	cfg.Steps, cfg.Accum, cfg.EvalEvery = 8, 2, 0
	cfg, m, err := train.Prepare(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ds := memoryDataset(t, fixture.SyntheticText(60_000), cfg.Model.Context)
	want, _ := runtest.SetupLosses(t, cfg, ds.Train)
	if !(want[len(want)-1] < want[0]) {
		t.Fatalf("reference losses %v do not fall", want)
	}

	// The batches and learning rates of the reference run.
	sampler, err := data.NewSampler(ds.Train, cfg.Model.Context, cfg.Seed)
	if err != nil {
		t.Fatal(err)
	}
	sched, err := train.NewSchedule(cfg)
	if err != nil {
		t.Fatal(err)
	}
	batches := make([]step.Batch, cfg.Steps)
	for i := range batches {
		b, err := data.NewBatch(cfg.Accum, cfg.Batch, cfg.Model.Context)
		if err != nil {
			t.Fatal(err)
		}
		if err := sampler.FillBatch(b); err != nil {
			t.Fatal(err)
		}
		batches[i] = step.BatchOf(b)
	}

	err = threads.fresh(3, func(int) error {
		s, err := train.NewSetup(cfg, m, "")
		if err != nil {
			return err
		}
		defer s.Free()
		for i, b := range batches {
			var loss float64
			if err := threads.one(func() (err error) {
				if i%2 == 0 {
					loss, err = s.State.Update(sched.LR(i), b)
					return err
				}
				if err := s.State.UpdateAsync(sched.LR(i), b); err != nil {
					return err
				}
				st, err := s.State.Stats()
				loss = st.Loss
				return err
			}); err != nil {
				return err
			}
			if loss != want[i] {
				return fmt.Errorf("update %d: loss %.7f, from the test goroutine %.7f", i+1, loss, want[i])
			}
		}
		if n := s.Step.Traces(); n != 1 {
			return fmt.Errorf("the compiled step traced %d times, want 1", n)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	// A bare Step.Run of the first update, its inputs built on the MLX thread.
	if err := threads.one(func() error {
		s, err := train.NewSetup(cfg, m, "")
		if err != nil {
			return err
		}
		defer s.Free()
		var x, y, lr *mlx.Array
		mlx.Do(func() error {
			b := batches[0]
			x, y, lr = mlx.FromSlice(b.X, b.N, b.B, b.T), mlx.FromSlice(b.Y, b.N, b.B, b.T), mlx.Scalar(sched.LR(0), mlx.Float32)
			return nil
		})
		res, err := s.Step.Run(s.State.Params(), s.State.OptState(), lr, x, y)
		if err != nil {
			return err
		}
		var loss float64
		err = mlx.Do(func() (err error) {
			loss, err = res.Loss.Item()
			mlx.Free(append(append(res.Params, res.State...), res.Loss, res.GradNorm, x, y, lr)...)
			return err
		})
		if err == nil && (loss != want[0] || s.Step.Traces() != 1) {
			err = fmt.Errorf("Step.Run: loss %.7f after %d traces, want %.7f after 1", loss, s.Step.Traces(), want[0])
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}

	// A short Trainer.Run.
	var sum train.Summary
	var ms []train.Metrics
	if err := threads.one(func() error {
		tr, err := New(cfg, ds, t.TempDir())
		if err != nil {
			return err
		}
		if sum, err = tr.Run(context.Background(), ""); err != nil {
			return err
		}
		ms, err = train.ReadMetrics(filepath.Join(tr.RunDir, train.MetricsFile))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if sum.Traces != 1 || len(ms) != len(want) {
		t.Fatalf("Trainer.Run traced %d times and logged %d steps, want 1 and %d", sum.Traces, len(ms), len(want))
	}
	for i, m := range ms {
		if m.Loss != want[i] {
			t.Fatalf("Trainer.Run step %d: loss %.7f, from the test goroutine %.7f", m.Step, m.Loss, want[i])
		}
	}
}
