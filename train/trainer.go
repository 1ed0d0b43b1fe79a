package train

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"github.com/posttrainllm/posttrainllm/data"
	"github.com/posttrainllm/posttrainllm/mlx"
	"github.com/posttrainllm/posttrainllm/model"
	"github.com/posttrainllm/posttrainllm/optim"
)

// ErrInterrupted is returned (wrapped) when the run's context was cancelled:
// the step in flight finished and a checkpoint was written.
var ErrInterrupted = errors.New("training interrupted")

// ErrNonFinite is returned (wrapped) when the loss, the gradient norm or,
// before a checkpoint, the parameters or optimizer state became NaN or Inf;
// the run stops without writing a checkpoint, so the last good one stays
// intact.
var ErrNonFinite = errors.New("values are not finite")

// Hooks let a caller observe a run (progress bars, logs). Each may be nil.
type Hooks struct {
	OnStart      func(Start)
	OnLog        func(Metrics)
	OnCheckpoint func(dir string, step int)
}

// Start describes a run as it begins.
type Start struct {
	Step, Steps   int // first update to run, total updates
	Params        int
	TokensPerStep int
	Resumed       string // checkpoint directory, "" for a fresh run
}

// Summary is the outcome of Run.
type Summary struct {
	StartStep, Step   int // first update run, updates completed
	FirstLoss, Loss   float64
	InitialValLoss    float64 // NaN when not measured
	ValLoss           float64 // NaN when not measured
	Traces            int     // how often the step was traced (compiled) or run (interpreted)
	Elapsed           time.Duration
	LastCheckpoint    string
	TokensPerS        float64
	PeakMemoryBytes   uint64
	ActiveMemoryBytes uint64
}

// Trainer trains a TinyGPT on a Dataset, writing metrics and checkpoints
// into a run folder.
type Trainer struct {
	Config Config
	Model  *model.TinyGPT
	Data   *Dataset
	RunDir string
	Hooks  Hooks
}

// New checks cfg against the dataset (vocabulary, context) and returns a
// trainer writing into runDir.
func New(cfg Config, ds *Dataset, runDir string) (*Trainer, error) {
	cfg = cfg.WithDefaults()
	if cfg.Model.VocabSize == 0 {
		cfg.Model.VocabSize = ds.Tokenizer.VocabSize()
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := cfg.CheckMemory(); err != nil {
		return nil, err
	}
	if ds.Tokenizer.Name() != cfg.Tokenizer {
		return nil, fmt.Errorf("the dataset was tokenised with %s, the config says tokenizer %q",
			ds.Tokenizer.Name(), cfg.Tokenizer)
	}
	m, err := model.New(cfg.Model)
	if err != nil {
		return nil, err
	}
	cfg.Model = m.Config
	return &Trainer{Config: cfg, Model: m, Data: ds, RunDir: runDir}, nil
}

// loopState is what the training loop carries from step to step.
type loopState struct {
	params, opt  []*mlx.Array
	step         int
	samplerState []byte
	tokensSeen   int64
	elapsed      time.Duration
}

func (s *loopState) free() {
	mlx.Free(s.params...)
	mlx.Free(s.opt...)
}

// Run trains from scratch, or from the checkpoint directory resumeFrom,
// until Config.Steps updates are done or ctx is cancelled. It locks its
// goroutine to one OS thread: MLX state is per thread.
func (t *Trainer) Run(ctx context.Context, resumeFrom string) (Summary, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	cfg := t.Config
	sum := Summary{InitialValLoss: math.NaN(), ValLoss: math.NaN(), FirstLoss: math.NaN(), Loss: math.NaN()}

	if err := mlx.UseDevice(cfg.Device); err != nil {
		return sum, err
	}
	if err := os.MkdirAll(t.RunDir, 0o755); err != nil {
		return sum, fmt.Errorf("run folder: %w", err)
	}
	opt, err := NewOptimizer(cfg, t.Model.Specs)
	if err != nil {
		return sum, err
	}
	st, err := t.initialState(opt, resumeFrom)
	if err != nil {
		return sum, err
	}
	defer func() { st.free() }()
	sum.StartStep, sum.Step = st.step, st.step

	sched, err := NewSchedule(cfg)
	if err != nil {
		return sum, err
	}
	step, err := NewStep(t.Model.Loss, opt, len(st.params), len(st.opt),
		RunStepOptions(cfg))
	if err != nil {
		return sum, err
	}
	defer step.Free()
	eval, err := NewEvaluator(t.Model.LossTerms, t.Data.Val, cfg.Batch, cfg.Model.Context, cfg.EvalTokens, cfg.Seed+1, cfg.Compile)
	if err != nil {
		return sum, err
	}
	defer eval.Free()

	sampler, err := data.NewSampler(t.Data.Train, cfg.Model.Context, cfg.Seed)
	if err != nil {
		return sum, err
	}
	if st.samplerState != nil {
		if err := sampler.SetState(st.samplerState); err != nil {
			return sum, fmt.Errorf("resume: sampler state: %w", err)
		}
	}
	pf, err := data.NewPrefetcher(sampler, cfg.Accum, cfg.Batch, cfg.Model.Context, cfg.PrefetchDepth)
	if err != nil {
		return sum, err
	}
	defer pf.Stop()

	metrics, err := openMetrics(filepath.Join(t.RunDir, MetricsFile), st.step, resumeFrom != "")
	if err != nil {
		return sum, fmt.Errorf("metrics: %w", err)
	}
	defer metrics.Close()

	if t.Hooks.OnStart != nil {
		t.Hooks.OnStart(Start{Step: st.step, Steps: cfg.Steps, Params: cfg.Model.NumParams(),
			TokensPerStep: cfg.TokensPerStep(), Resumed: resumeFrom})
	}
	mlx.ResetPeakMemory()
	if cfg.EvalEvery > 0 && st.step == 0 {
		m := Metrics{Step: 0, Loss: math.NaN(), LR: sched.LR(0)}
		if sum.InitialValLoss, err = eval.record(st.params, cfg.Model.ZLoss, &m); err != nil {
			return sum, err
		}
		sum.ValLoss = sum.InitialValLoss
		if err := writeMetrics(metrics, metricsForJSON(m)); err != nil {
			return sum, err
		}
	}

	start := time.Now()
	runStart := st.elapsed
	lastLog, lastLogStep := start, st.step
	checkpoint := func() error {
		// The loss checked so far was computed before the last update; an
		// update that overflowed shows only in the arrays about to be saved.
		if bad, err := nonFiniteArrays(t.Model.Specs, opt.StateNames(), st.params, st.opt); err != nil {
			return err
		} else if bad != "" {
			sum.Elapsed = time.Since(start)
			return fmt.Errorf("step %d: %s is not finite; stopping without a checkpoint, the last good one is %s: %w",
				st.step, bad, lastGood(sum.LastCheckpoint, resumeFrom), ErrNonFinite)
		}
		st.elapsed = runStart + time.Since(start)
		dir, err := t.saveCheckpoint(opt, st)
		if err != nil {
			return err
		}
		sum.LastCheckpoint = dir
		if t.Hooks.OnCheckpoint != nil {
			t.Hooks.OnCheckpoint(dir, st.step)
		}
		return nil
	}

	for st.step < cfg.Steps {
		if ctx.Err() != nil {
			if err := checkpoint(); err != nil {
				return sum, err
			}
			sum.Elapsed = time.Since(start)
			return sum, fmt.Errorf("at step %d: %w", st.step, ErrInterrupted)
		}
		batch, err := pf.Next()
		if err != nil {
			return sum, err
		}
		x := mlx.FromSlice(batch.X, batch.N, batch.B, batch.T)
		y := mlx.FromSlice(batch.Y, batch.N, batch.B, batch.T)
		st.samplerState = append(st.samplerState[:0], batch.State...)
		pf.Release(batch)
		lrValue := sched.LR(st.step)
		lr := mlx.Scalar(lrValue, mlx.Float32)
		res, err := step.Run(st.params, st.opt, lr, x, y)
		mlx.Free(x, y, lr)
		if err != nil {
			return sum, err
		}
		mlx.Free(st.params...)
		mlx.Free(st.opt...)
		st.params, st.opt = res.Params, res.State
		st.step++
		st.tokensSeen += int64(cfg.TokensPerStep())
		pending := append(append(append([]*mlx.Array{}, st.params...), st.opt...), res.Loss, res.GradNorm)
		if err := mlx.AsyncEval(append(pending, step.Copies()...)...); err != nil {
			mlx.Free(res.Loss, res.GradNorm)
			return sum, err
		}

		logNow := st.step%cfg.LogEvery == 0 || st.step == cfg.Steps
		evalNow := cfg.EvalEvery > 0 && (st.step%cfg.EvalEvery == 0 || st.step == cfg.Steps)
		ckptNow := (cfg.CheckpointEvery > 0 && st.step%cfg.CheckpointEvery == 0) || st.step == cfg.Steps
		if logNow || evalNow || ckptNow {
			loss, lerr := res.Loss.Item()
			gnorm, _ := res.GradNorm.Item()
			mlx.Free(res.Loss, res.GradNorm)
			if lerr != nil {
				return sum, lerr
			}
			if bad := nonFinite(loss, gnorm); bad != "" {
				sum.Elapsed = time.Since(start)
				return sum, fmt.Errorf("step %d: %s (lr %.3g); stopping without a checkpoint, the last good one is %s: %w",
					st.step, bad, lrValue, lastGood(sum.LastCheckpoint, resumeFrom), ErrNonFinite)
			}
			if math.IsNaN(sum.FirstLoss) {
				sum.FirstLoss = loss
			}
			sum.Loss = loss
			now := time.Now()
			dt := now.Sub(lastLog).Seconds()
			m := Metrics{Step: st.step, Loss: loss, LR: lrValue, GradNorm: gnorm,
				ElapsedS: (runStart + now.Sub(start)).Seconds()}
			if dt > 0 {
				m.StepsPerS = float64(st.step-lastLogStep) / dt
				m.TokensPerS = m.StepsPerS * float64(cfg.TokensPerStep())
			}
			lastLog, lastLogStep = now, st.step
			if evalNow {
				if sum.ValLoss, err = eval.record(st.params, cfg.Model.ZLoss, &m); err != nil {
					return sum, err
				}
			}
			sum.TokensPerS = m.TokensPerS
			if err := writeMetrics(metrics, m); err != nil {
				return sum, fmt.Errorf("metrics: %w", err)
			}
			if t.Hooks.OnLog != nil {
				t.Hooks.OnLog(m)
			}
		} else {
			mlx.Free(res.Loss, res.GradNorm)
		}
		if ckptNow {
			if err := checkpoint(); err != nil {
				return sum, err
			}
		}
		sum.Step = st.step
	}
	sum.Step = st.step
	sum.Traces = step.Traces()
	sum.Elapsed = time.Since(start)
	mem := mlx.Memory()
	sum.PeakMemoryBytes, sum.ActiveMemoryBytes = mem.Peak, mem.Active
	if elapsed := sum.Elapsed.Seconds(); elapsed > 0 && sum.TokensPerS == 0 {
		sum.TokensPerS = float64(int64(st.step-sum.StartStep)*int64(cfg.TokensPerStep())) / elapsed
	}
	return sum, nil
}

// nonFinite describes a NaN or infinite loss or gradient norm, or returns "".
func nonFinite(loss, gradNorm float64) string {
	switch {
	case math.IsNaN(loss) || math.IsInf(loss, 0):
		return fmt.Sprintf("loss is %v", loss)
	case math.IsNaN(gradNorm) || math.IsInf(gradNorm, 0):
		return fmt.Sprintf("gradient norm is %v (loss %.4g)", gradNorm, loss)
	}
	return ""
}

// nonFiniteArrays names the first parameter or optimizer state array that
// holds a NaN or Inf, or returns "". It reads back one boolean per array.
func nonFiniteArrays(specs []model.ParamSpec, stateNames []string, params, state []*mlx.Array) (string, error) {
	var bad string
	var err error
	mlx.Run(func() []*mlx.Array {
		arrs := append(append([]*mlx.Array{}, params...), state...)
		flags := make([]*mlx.Array, len(arrs))
		for i, a := range arrs {
			flags[i] = mlx.All(mlx.IsFinite(a))
		}
		if err = mlx.Eval(flags...); err != nil {
			return nil
		}
		for i, f := range flags {
			ok, e := f.Item()
			if e != nil {
				err = e
				return nil
			}
			if ok == 0 {
				if i < len(params) {
					bad = fmt.Sprintf("parameter %q", specs[i].Name)
				} else {
					bad = fmt.Sprintf("optimizer state %q", stateNames[i-len(params)])
				}
				return nil
			}
		}
		return nil
	})
	return bad, err
}

func lastGood(saved, resumed string) string {
	switch {
	case saved != "":
		return saved
	case resumed != "":
		return resumed
	}
	return "(none written yet)"
}

// metricsForJSON replaces a NaN loss (not measured) by zero so the JSON
// line stays valid; the step-0 line carries only val_loss.
func metricsForJSON(m Metrics) Metrics {
	if math.IsNaN(m.Loss) {
		m.Loss = 0
	}
	return m
}

// initialState initialises parameters and optimizer state, or loads them
// from a checkpoint, checking that it belongs to this model.
func (t *Trainer) initialState(opt optim.Optimizer, resumeFrom string) (*loopState, error) {
	if resumeFrom == "" {
		params, err := t.Model.Init(t.Config.Seed)
		if err != nil {
			return nil, err
		}
		state, err := opt.Init()
		if err != nil {
			mlx.Free(params...)
			return nil, err
		}
		return &loopState{params: params, opt: state}, nil
	}
	ck, err := LoadCheckpoint(resumeFrom)
	if err != nil {
		return nil, fmt.Errorf("resume: %w", err)
	}
	if ck.State.Config.Model != t.Config.Model {
		ck.Free()
		return nil, fmt.Errorf("resume: checkpoint %s is of another model shape (%+v), this run needs %+v",
			resumeFrom, ck.State.Config.Model, t.Config.Model)
	}
	names := make([]string, len(t.Model.Specs))
	shapes := make([][]int, len(t.Model.Specs))
	for i, s := range t.Model.Specs {
		names[i], shapes[i] = s.Name, s.Shape
	}
	params, err := ordered(filepath.Join(resumeFrom, ModelFile), ck.Params, names, shapes)
	if err != nil {
		ck.Free()
		return nil, fmt.Errorf("resume: %w", err)
	}
	for i, p := range params {
		if want := t.Config.Model.ParamDtype(); p.Dtype() != want {
			ck.Free()
			return nil, fmt.Errorf("resume: %s: %q is %v, this model keeps parameters in %v",
				filepath.Join(resumeFrom, ModelFile), names[i], p.Dtype(), want)
		}
	}
	// A fresh state's arrays are lazy zeros: their shapes and dtypes are
	// what the checkpoint must hold, and nothing is allocated.
	fresh, err := opt.Init()
	if err != nil {
		ck.Free()
		return nil, err
	}
	defer mlx.Free(fresh...)
	stateShapes := make([][]int, len(fresh))
	for i, a := range fresh {
		stateShapes[i] = a.Shape()
	}
	state, err := ordered(filepath.Join(resumeFrom, OptimizerFile), ck.OptState, opt.StateNames(), stateShapes)
	if err != nil {
		ck.Free()
		return nil, fmt.Errorf("resume: %w (optimizer %s)", err, t.Config.Optimizer)
	}
	for i, a := range state {
		if a.Dtype() != fresh[i].Dtype() {
			ck.Free()
			return nil, fmt.Errorf("resume: %s: %q is %v, the %s optimizer keeps it in %v",
				filepath.Join(resumeFrom, OptimizerFile), opt.StateNames()[i], a.Dtype(), t.Config.Optimizer, fresh[i].Dtype())
		}
	}
	return &loopState{params: params, opt: state, step: ck.State.Step, samplerState: ck.State.SamplerState,
		tokensSeen: ck.State.TokensSeen, elapsed: time.Duration(ck.State.ElapsedSeconds * float64(time.Second))}, nil
}

func (t *Trainer) saveCheckpoint(opt optim.Optimizer, st *loopState) (string, error) {
	names := make([]string, len(t.Model.Specs))
	for i, s := range t.Model.Specs {
		names[i] = s.Name
	}
	rs := RunState{Step: st.step, Config: t.Config, SamplerState: st.samplerState,
		TokensSeen: st.tokensSeen, ElapsedSeconds: st.elapsed.Seconds()}
	root := CheckpointRoot(t.RunDir)
	dir, err := SaveCheckpoint(root, rs, names, st.params, opt.StateNames(), st.opt)
	if err != nil {
		return "", err
	}
	if err := PruneCheckpoints(root, t.Config.KeepCheckpoints); err != nil {
		return "", fmt.Errorf("checkpoint: pruning: %w", err)
	}
	return dir, nil
}
