package train

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"time"

	"github.com/posttrainllm/posttrainllm/data"
	"github.com/posttrainllm/posttrainllm/mlx"
	"github.com/posttrainllm/posttrainllm/model"
)

// ErrInterrupted is returned (wrapped) when the run's context was cancelled:
// the step in flight finished and a checkpoint was written.
var ErrInterrupted = errors.New("training interrupted")

// ErrNonFinite is returned (wrapped) when the loss, the gradient norm or,
// before a checkpoint, the parameters or optimizer state became NaN or Inf;
// the run stops without writing a checkpoint, so the last good one stays
// intact.
var ErrNonFinite = errors.New("values are not finite")

// Hooks let a caller observe a run (progress bars, logs, plots). Each may
// be nil. They are called on the MLX thread, inside Run: they may use MLX,
// but must not wait for another goroutine that does, and the run waits for
// them.
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
	Plan          Plan   // how each update runs its sequences
	Windows       string // where the training windows come from (DescribeWindows)
}

// Summary is the outcome of Run.
type Summary struct {
	StartStep, Step int // first update run, updates completed
	// FirstLoss and Loss are the first and the last logged loss: each the
	// token-weighted mean over its log interval (Metrics.Loss).
	FirstLoss, Loss   float64
	InitialValLoss    float64 // NaN when not measured
	ValLoss           float64 // NaN when not measured
	Traces            int     // how often the step was traced (compiled) or run (interpreted)
	Elapsed           time.Duration
	LastCheckpoint    string
	TokensPerS        float64
	PeakMemoryBytes   uint64
	ActiveMemoryBytes uint64
	Plan              Plan
}

// Trainer trains a TinyGPT on a Dataset, writing metrics and checkpoints
// into a run folder.
type Trainer struct {
	Config Config
	Model  *model.TinyGPT
	Data   *Dataset
	RunDir string
	Hooks  Hooks
	// Group is the data-parallel group this process is a rank of; nil (or
	// size 1) trains alone. Every rank runs the same updates on its shard
	// of the data (data.Sampler.Shard with Config.Batch rows), so an update
	// covers Size() × Batch × Accum sequences. Rank 0 alone evaluates,
	// writes the run folder (metrics, checkpoints) and calls the Hooks;
	// the others check the same loss and parameters for non-finite values,
	// so every rank stops at the same step.
	Group *mlx.Group
}

// lead reports whether this process writes the run's output: rank 0.
func (t *Trainer) lead() bool { return t.Group.Rank() == 0 }

// tokensPerStep is the tokens one update covers across the whole group.
func (t *Trainer) tokensPerStep() int { return t.Config.TokensPerStep() * t.Group.Size() }

// New checks cfg against the dataset (vocabulary, context) and returns a
// trainer writing into runDir.
func New(cfg Config, ds *Dataset, runDir string) (*Trainer, error) {
	cfg = cfg.WithDefaults()
	if cfg.Model.VocabSize == 0 {
		cfg.Model.VocabSize = ds.Tokenizer.VocabSize()
	}
	cfg, m, err := Prepare(cfg)
	if err != nil {
		return nil, err
	}
	if err := checkTokenizer(ds.Tokenizer, cfg); err != nil {
		return nil, fmt.Errorf("the dataset: %w", err)
	}
	return &Trainer{Config: cfg, Model: m, Data: ds, RunDir: runDir}, nil
}

// Run trains from scratch, or from the checkpoint directory resumeFrom,
// until Config.Steps updates are done or ctx is cancelled. It runs on the
// MLX thread (mlx.Do), and so do the Hooks it calls: they may use MLX, but
// must not wait for another goroutine that does.
func (t *Trainer) Run(ctx context.Context, resumeFrom string) (Summary, error) {
	sum := Summary{InitialValLoss: math.NaN(), ValLoss: math.NaN(), FirstLoss: math.NaN(), Loss: math.NaN()}
	err := mlx.Do(func() error {
		r, err := t.open(resumeFrom, &sum)
		if err != nil {
			return err
		}
		defer r.close()
		return r.train(ctx)
	})
	return sum, err
}

// run is one Trainer.Run in progress: what it set up and what it carries
// from step to step.
type run struct {
	t          *Trainer
	cfg        Config
	resumeFrom string
	setup      *Setup
	eval       *Evaluator
	prefetch   *data.Prefetcher
	stream     *TokenStream     // the training view on the device, or nil (WindowSource)
	galore     *GaLoreRefresher // nil unless the optimizer is galore
	sophia     *SophiaEstimator // nil unless the optimizer is sophia
	sink       sinks            // metrics.jsonl and TensorBoard; rank 0 only
	sum        *Summary

	step         int // updates completed
	samplerState []byte
	tokensSeen   int64
	before       time.Duration // training time of the run before it was resumed
	start        time.Time     // this process's first update
	lastLog      time.Time
	lastLogStep  int
}

// open prepares a run: the run folder, the setup (fresh or resumed), the
// evaluator, the data and the metrics log; then it calls Hooks.OnStart.
func (t *Trainer) open(resumeFrom string, sum *Summary) (_ *run, err error) {
	cfg := t.Config
	r := &run{t: t, cfg: cfg, resumeFrom: resumeFrom, sum: sum}
	defer func() {
		if err != nil {
			r.close()
		}
	}()
	if t.lead() { // rank 0 owns the run folder
		if err := os.MkdirAll(t.RunDir, 0o755); err != nil {
			return nil, fmt.Errorf("run folder: %w", err)
		}
		if resumeFrom != "" {
			if err := copyTokenizerDir(RunDirOf(resumeFrom), t.RunDir); err != nil {
				return nil, err
			}
		}
	}
	if r.setup, err = NewGroupSetup(cfg, t.Model, resumeFrom, t.Group); err != nil {
		return nil, err
	}
	if rs := r.setup.Resumed; rs != nil {
		r.step, r.samplerState, r.tokensSeen = rs.Step, rs.SamplerState, rs.TokensSeen
		r.before = time.Duration(rs.ElapsedSeconds * float64(time.Second))
	}
	sum.StartStep, sum.Step = r.step, r.step
	if g := t.Group; g.Size() > 1 && (cfg.Optimizer == "galore" || cfg.Optimizer == "sophia") {
		return nil, fmt.Errorf("train: optimizer %q on %d data-parallel ranks: its refresh reads one rank's batch and the ranks would diverge; use it in one process", cfg.Optimizer, g.Size())
	}
	if r.galore, err = NewGaLoreRefresher(r.setup.Optimizer, t.Model); err != nil {
		return nil, err
	}
	if r.sophia, err = NewSophiaEstimator(r.setup.Optimizer, t.Model, cfg.Seed, cfg.Compile); err != nil {
		return nil, err
	}
	if t.lead() {
		r.eval, err = NewEvaluator(t.Model.LossTerms, t.Data.Val, cfg.Batch, cfg.Model.Context, cfg.EvalTokens, cfg.Seed+1, cfg.Compile)
		if err != nil {
			return nil, err
		}
	}
	sampler, err := data.NewSampler(t.Data.Train, cfg.Model.Context, cfg.Seed)
	if err != nil {
		return nil, err
	}
	if g := t.Group; g.Size() > 1 {
		if err := sampler.Shard(g.Rank(), g.Size(), cfg.Batch); err != nil {
			return nil, err
		}
	}
	if err := SetBPEDropout(sampler, cfg); err != nil {
		return nil, err
	}
	if r.samplerState != nil {
		if err := sampler.SetState(r.samplerState); err != nil {
			return nil, fmt.Errorf("resume: sampler state: %w", err)
		}
	}
	// Batches come in the plan's shape; the sampler draws the same windows
	// in the same order whatever the plan (Plan.NewBatch).
	plan := r.setup.Plan
	sum.Plan = plan
	if device, _ := WindowSource(cfg, t.Data.Train.Len()); device {
		if r.stream, err = NewTokenStream(t.Data.Train, cfg.Model.Context); err != nil {
			return nil, err
		}
		r.prefetch, err = data.NewStartsPrefetcher(sampler, plan.Steps, plan.MicroBatch, cfg.Model.Context, cfg.PrefetchDepth)
	} else {
		r.prefetch, err = data.NewPrefetcher(sampler, plan.Steps, plan.MicroBatch, cfg.Model.Context, cfg.PrefetchDepth)
	}
	if err != nil {
		return nil, err
	}
	if !t.lead() {
		return r, nil
	}
	if r.sink, err = openSinks(t.RunDir, r.step, resumeFrom != "", Setting{"config", cfg}); err != nil {
		return nil, err
	}
	if t.Hooks.OnStart != nil {
		t.Hooks.OnStart(Start{Step: r.step, Steps: cfg.Steps, Params: cfg.Model.NumParams(),
			TokensPerStep: t.tokensPerStep(), Resumed: resumeFrom, Plan: plan,
			Windows: DescribeWindows(cfg, t.Data.Train.Len())})
	}
	return r, nil
}

// close releases what open set up.
func (r *run) close() {
	r.sink.Close()
	if r.prefetch != nil {
		r.prefetch.Stop()
	}
	r.stream.Free()
	r.eval.Free()
	r.galore.Free()
	r.sophia.Free()
	r.setup.Free()
}

// train runs the updates, logging, evaluating and checkpointing as the
// config says, until the last step or until ctx is cancelled.
func (r *run) train(ctx context.Context) error {
	mlx.ResetPeakMemory()
	if err := r.initialEval(); err != nil {
		return err
	}
	r.start = time.Now()
	r.lastLog, r.lastLogStep = r.start, r.step
	for r.step < r.cfg.Steps {
		if ctx.Err() != nil {
			if err := r.checkpoint(); err != nil {
				return err
			}
			r.sum.Elapsed = time.Since(r.start)
			return fmt.Errorf("at step %d: %w", r.step, ErrInterrupted)
		}
		lr, err := r.update()
		if err != nil {
			return err
		}
		logNow, evalNow, ckptNow := r.due()
		if logNow || evalNow || ckptNow {
			if err := r.log(lr, evalNow); err != nil {
				return err
			}
		}
		if ckptNow {
			if err := r.checkpoint(); err != nil {
				return err
			}
		}
		r.sum.Step = r.step
	}
	r.finish()
	return nil
}

// initialEval measures and logs the held-out loss of a fresh run's initial
// parameters, as step 0.
func (r *run) initialEval() error {
	if r.cfg.EvalEvery == 0 || r.step != 0 || !r.t.lead() {
		return nil
	}
	m := Metrics{Step: 0, Loss: math.NaN(), LR: r.setup.Schedule.LR(0)}
	v, err := r.eval.record(r.setup.State.Params(), r.cfg.Model.ZLoss, &m)
	if err != nil {
		return err
	}
	r.sum.InitialValLoss, r.sum.ValLoss = v, v
	return r.sink.Log(m)
}

// update schedules the next optimizer update on the next prefetched batch
// and returns its learning rate; it does not wait for the device.
func (r *run) update() (float64, error) {
	batch, err := r.prefetch.Next()
	if err != nil {
		return 0, err
	}
	lr := r.setup.Schedule.LR(r.step)
	if r.galore.Due(r.step) {
		if err := r.galore.Refresh(r.setup.State, BatchOf(batch)); err != nil {
			return 0, err
		}
	}
	if r.sophia.Due(r.step) {
		if err := r.sophia.Estimate(r.setup.State, BatchOf(batch), r.step); err != nil {
			return 0, err
		}
	}
	b := BatchOf(batch)
	if r.stream != nil {
		b = r.stream.Batch(batch)
	}
	err = r.setup.State.UpdateAsync(lr, b)
	r.samplerState = append(r.samplerState[:0], batch.State...)
	r.prefetch.Release(batch)
	if err != nil {
		return 0, err
	}
	r.step++
	r.tokensSeen += int64(r.t.tokensPerStep())
	return lr, nil
}

// due says whether the step just completed is logged, evaluated and
// checkpointed; the last step is all three (evaluated when evaluation is on).
func (r *run) due() (log, eval, checkpoint bool) { return r.cfg.due(r.step) }

// due says whether a run of c, having just completed step, logs,
// evaluates and checkpoints: every LogEvery, EvalEvery (0: never) and
// CheckpointEvery (0: never) steps, and all three at the last step.
func (c Config) due(step int) (log, eval, checkpoint bool) {
	last := step == c.Steps
	log = step%c.LogEvery == 0 || last
	eval = c.EvalEvery > 0 && (step%c.EvalEvery == 0 || last)
	checkpoint = (c.CheckpointEvery > 0 && step%c.CheckpointEvery == 0) || last
	return log, eval, checkpoint
}

// log reads back the step's loss and gradient norm and the mean loss since
// the last line, stops on a value that is not finite, evaluates when
// asked, and writes the metrics line.
func (r *run) log(lr float64, eval bool) error {
	st, err := r.setup.State.Stats()
	if err != nil {
		return err
	}
	mean, _, _, err := r.setup.State.IntervalLoss()
	if err != nil {
		return err
	}
	if bad := logNonFinite(st, mean); bad != "" {
		r.sum.Elapsed = time.Since(r.start)
		return fmt.Errorf("step %d: %s (lr %.3g); stopping without a checkpoint, the last good one is %s: %w",
			r.step, bad, lr, r.lastGood(), ErrNonFinite)
	}
	if math.IsNaN(r.sum.FirstLoss) {
		r.sum.FirstLoss = mean
	}
	r.sum.Loss = mean
	now := time.Now()
	m := Metrics{Step: r.step, Loss: mean, LossLast: st.Loss, LR: lr, GradNorm: st.GradNorm,
		ElapsedS:   (r.before + now.Sub(r.start)).Seconds(),
		MicroBatch: r.setup.Plan.MicroBatch, AccumSteps: r.setup.Plan.Steps}
	if dt := now.Sub(r.lastLog).Seconds(); dt > 0 {
		m.StepsPerS = float64(r.step-r.lastLogStep) / dt
		m.TokensPerS = m.StepsPerS * float64(r.t.tokensPerStep())
	}
	r.lastLog, r.lastLogStep = now, r.step
	r.sum.TokensPerS = m.TokensPerS
	if !r.t.lead() {
		return nil
	}
	if eval {
		v, err := r.eval.record(r.setup.State.Params(), r.cfg.Model.ZLoss, &m)
		if err != nil {
			return err
		}
		r.sum.ValLoss = v
	}
	m.PeakMemoryBytes = mlx.Memory().Peak
	if err := r.sink.Log(m); err != nil {
		return err
	}
	if r.t.Hooks.OnLog != nil {
		r.t.Hooks.OnLog(m)
	}
	return nil
}

// checkpoint saves the state after checking that it is finite: the loss
// checked so far was computed before the last update, and an update that
// overflowed shows only in the arrays about to be saved.
func (r *run) checkpoint() error {
	st := r.setup.State
	bad, err := nonFiniteArrays(r.t.Model.Specs, r.setup.Optimizer.StateNames(), st.Params(), st.OptState())
	if err != nil {
		return err
	}
	if bad != "" {
		r.sum.Elapsed = time.Since(r.start)
		return fmt.Errorf("step %d: %s is not finite; stopping without a checkpoint, the last good one is %s: %w",
			r.step, bad, r.lastGood(), ErrNonFinite)
	}
	if !r.t.lead() {
		return nil
	}
	names := make([]string, len(r.t.Model.Specs))
	for i, s := range r.t.Model.Specs {
		names[i] = s.Name
	}
	rs := RunState{Step: r.step, Config: r.cfg, SamplerState: r.samplerState,
		TokensSeen: r.tokensSeen, ElapsedSeconds: (r.before + time.Since(r.start)).Seconds()}
	root := CheckpointRoot(r.t.RunDir)
	dir, err := SaveCheckpoint(root, rs, names, st.Params(), r.setup.Optimizer.StateNames(), st.OptState())
	if err != nil {
		return err
	}
	if err := PruneCheckpoints(root, r.cfg.KeepCheckpoints); err != nil {
		return fmt.Errorf("checkpoint: pruning: %w", err)
	}
	r.sum.LastCheckpoint = dir
	if r.t.Hooks.OnCheckpoint != nil {
		r.t.Hooks.OnCheckpoint(dir, r.step)
	}
	return nil
}

// lastGood names the checkpoint a diverged run falls back to.
func (r *run) lastGood() string {
	switch {
	case r.sum.LastCheckpoint != "":
		return r.sum.LastCheckpoint
	case r.resumeFrom != "":
		return r.resumeFrom
	}
	return "(none written yet)"
}

// finish completes the summary of a run that reached its last step.
func (r *run) finish() {
	r.sum.finish(r.step, r.setup.Step.Traces(), r.start, r.t.tokensPerStep())
}

// finish completes a summary at step of a run that started at start:
// traces, elapsed time, peak and active memory, and tokens per second
// unless already set.
func (sum *Summary) finish(step, traces int, start time.Time, tokensPerStep int) {
	sum.Step = step
	sum.Traces = traces
	sum.Elapsed = time.Since(start)
	mem := mlx.Memory()
	sum.PeakMemoryBytes, sum.ActiveMemoryBytes = mem.Peak, mem.Active
	if elapsed := sum.Elapsed.Seconds(); elapsed > 0 && sum.TokensPerS == 0 {
		sum.TokensPerS = float64(int64(step-sum.StartStep)*int64(tokensPerStep)) / elapsed
	}
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

// logNonFinite describes what is not finite at a log line: the last
// update's loss or gradient norm (st), or the interval's mean loss; ""
// when all are finite.
func logNonFinite(st StepStats, mean float64) string {
	if bad := nonFinite(st.Loss, st.GradNorm); bad != "" {
		return bad
	}
	return nonFinite(mean, st.GradNorm)
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
