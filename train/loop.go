package train

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"time"

	"github.com/posttrainllm/posttrainllm/checkpoint"
	"github.com/posttrainllm/posttrainllm/mlx"
	"github.com/posttrainllm/posttrainllm/model"
	"github.com/posttrainllm/posttrainllm/optim"
	"github.com/posttrainllm/posttrainllm/step"
)

// Task is one kind of run: what it trains, what it feeds the step, what
// it evaluates and what its checkpoints hold. Pretraining (package
// pretrain, its Trainer's task) feeds windows of a token corpus to the
// model's step and saves whole checkpoints; a fine-tune (package finetune) feeds weighted rows to
// a step over frozen base weights and saves its trainable arrays with
// finetune.json. Everything else, the same for every kind, is the loop's
// (RunLoop): counting updates, cancellation, logging, metrics sinks,
// hooks, divergence checks, checkpoint pruning and the summary. The loop
// calls its methods on the MLX thread.
type Task interface {
	// Open builds the run's step and state, fresh or resumed from the
	// checkpoint directory env.ResumeFrom, and its data source, positioned
	// after the resumed checkpoint's last batch. On the lead rank it also
	// puts what the run folder needs beside the checkpoints (the
	// tokenizer). What it returns the loop only reads; Close frees it.
	Open(env TaskEnv) (TaskParts, error)
	// Next returns the next update's batch. It may update the state
	// itself first (GaLore's and Sophia's refreshes read the batch).
	Next(step int) (step.Batch, error)
	// Release appends the data source's state after the batch Next
	// returned (what a checkpoint resumes from) to b and lets the batch's
	// buffers go; the loop calls it once the update is scheduled.
	Release(b []byte) []byte
	// Evaluates says whether the task has held-out data to evaluate.
	Evaluates() bool
	// Evaluate measures the held-out loss of the current state, writes it
	// (and what else it measured) into m and returns it. Lead rank only.
	Evaluate(m *Metrics) (float64, error)
	// Save writes a checkpoint of the current state under root with run
	// state rs and returns its directory. Lead rank only.
	Save(root string, rs RunState) (string, error)
	// Close frees what Open built. It runs after a failed Open too.
	Close()
}

// MetricsTask is a Task that measures metrics of its own (an online
// objective's rewards, say): at every log line the loop adds what
// TaskMetrics returns, the values since the last line, to Metrics.Aux.
type MetricsTask interface {
	Task
	TaskMetrics() map[string]float64
}

// TaskEnv is what a Task's Open is given.
type TaskEnv struct {
	Config     Config
	RunDir     string
	ResumeFrom string // the checkpoint directory resumed; "" for a fresh run
	Group      *mlx.Group
	Context    context.Context // the run's (RunLoop sets it)
}

// Lead reports whether this process writes the run folder: rank 0.
func (e TaskEnv) Lead() bool { return e.Group.Rank() == 0 }

// TaskParts are what a Task's Open hands the loop.
type TaskParts struct {
	Step     *step.Step
	State    *step.State
	Schedule optim.Schedule
	Plan     Plan
	// Specs and StateNames name the state's trainable arrays and
	// optimizer state, for the message of a divergence.
	Specs      []model.ParamSpec
	StateNames []string
	// Resumed is the run state of the checkpoint resumed, nil for a fresh
	// run.
	Resumed *RunState
	// TokensPerStep is the token positions of one rank's update; Start and
	// Settings describe the run (Hooks.OnStart, the metrics sinks).
	TokensPerStep int
	Start         Start
	Settings      []Setting
}

// RunLoop runs tk under env.Config into env.RunDir until Config.Steps
// updates are done or ctx is cancelled (then it writes a checkpoint and
// returns ErrInterrupted), on the MLX thread (mlx.Do), and so are the
// hooks. pretrain.Trainer.Run and finetune.FineTuner.Run are this loop.
func RunLoop(ctx context.Context, tk Task, env TaskEnv, hooks Hooks) (Summary, error) {
	sum := Summary{InitialValLoss: math.NaN(), ValLoss: math.NaN(), FirstLoss: math.NaN(), Loss: math.NaN()}
	env.Context = ctx
	err := mlx.Do(func() error {
		r := &run{task: tk, env: env, cfg: env.Config, hooks: hooks, sum: &sum}
		defer r.close()
		if err := r.open(); err != nil {
			return err
		}
		return r.train(ctx)
	})
	return sum, err
}

// run is one run in progress: its task and what the loop carries from
// step to step.
type run struct {
	task  Task
	env   TaskEnv
	cfg   Config
	hooks Hooks
	parts TaskParts // what the task's Open built
	// unlimit puts back MLX's memory limit, held at the budget while the
	// run is open (LimitMemory).
	unlimit func()
	sink    sinks // metrics.jsonl and TensorBoard; rank 0 only
	sum     *Summary

	step         int // updates completed
	samplerState []byte
	tokensSeen   int64
	before       time.Duration // training time of the run before it was resumed
	startup      Startup       // what the start took (Hooks.OnReady)
	start        time.Time     // this process's first update
	lastLog      time.Time
	lastLogStep  int
	// best is the lowest held-out loss so far (rank 0 only), which
	// Config.KeepBest and Config.Patience follow.
	best *Best
}

// lead reports whether this process writes the run's output: rank 0.
func (r *run) lead() bool { return r.env.Lead() }

// tokensPerUpdate is the tokens one update covers across the whole group.
func (r *run) tokensPerUpdate() int { return r.parts.TokensPerStep * r.env.Group.Size() }

// open prepares the run: the run folder, MLX's memory limit, the task
// (fresh or resumed) and the metrics log; then it calls Hooks.OnStart.
func (r *run) open() error {
	if r.lead() { // rank 0 owns the run folder
		if err := os.MkdirAll(r.env.RunDir, 0o755); err != nil {
			return fmt.Errorf("run folder: %w", err)
		}
	}
	var err error
	if r.unlimit, err = LimitMemory(r.cfg); err != nil {
		return err
	}
	opened := time.Now()
	if r.parts, err = r.task.Open(r.env); err != nil {
		return err
	}
	r.startup.Open = time.Since(opened)
	r.startup.Probe = time.Duration(r.parts.Plan.ProbeSeconds * float64(time.Second))
	r.startup.PlanCached = r.parts.Plan.Cached
	if rs := r.parts.Resumed; rs != nil {
		r.step, r.samplerState, r.tokensSeen = rs.Step, rs.SamplerState, rs.TokensSeen
		r.before = time.Duration(rs.ElapsedSeconds * float64(time.Second))
		if rs.Best != nil {
			b := *rs.Best
			r.best = &b
		}
	}
	if (r.cfg.KeepBest || r.cfg.Patience > 0) && (r.cfg.EvalEvery == 0 || !r.task.Evaluates()) {
		return fmt.Errorf("keep_best %v, patience %d: both follow the held-out loss; the run evaluates none (eval_every %d, held-out data %v)",
			r.cfg.KeepBest, r.cfg.Patience, r.cfg.EvalEvery, r.task.Evaluates())
	}
	r.sum.StartStep, r.sum.Step, r.sum.Plan = r.step, r.step, r.parts.Plan
	if !r.lead() {
		return nil
	}
	if r.sink, err = openSinks(r.env.RunDir, r.step, r.env.ResumeFrom != "", r.parts.Settings...); err != nil {
		return err
	}
	if r.hooks.OnStart != nil {
		s := r.parts.Start
		s.Step, s.Steps, s.TokensPerStep, s.Resumed, s.Plan = r.step, r.cfg.Steps, r.tokensPerUpdate(), r.env.ResumeFrom, r.parts.Plan
		r.hooks.OnStart(s)
	}
	return nil
}

// close releases what open set up.
func (r *run) close() {
	r.sink.Close()
	r.task.Close()
	if r.unlimit != nil {
		r.unlimit()
	}
}

// train runs the updates, logging, evaluating and checkpointing as the
// config says, until the last step or until ctx is cancelled.
func (r *run) train(ctx context.Context) error {
	mlx.ResetPeakMemory()
	evalStart := time.Now()
	if err := r.initialEval(); err != nil {
		return err
	}
	if r.cfg.EvalEvery > 0 && r.step == 0 && r.lead() && r.task.Evaluates() {
		r.startup.FirstEval = time.Since(evalStart)
	}
	r.start = time.Now()
	r.lastLog, r.lastLogStep = r.start, r.step
	for r.step < r.cfg.Steps {
		if ctx.Err() != nil {
			if err := r.checkpoint(); err != nil {
				return err
			}
			r.sum.Elapsed = time.Since(r.start)
			r.sum.noteBest(r.best)
			return fmt.Errorf("at step %d: %w", r.step, ErrInterrupted)
		}
		lr, err := r.update()
		if fe := (feedError{}); errors.As(err, &fe) {
			return r.stopOnFeedError(ctx, fe.err)
		} else if err != nil {
			return err
		}
		if r.startup.FirstUpdate == 0 {
			if err := r.ready(); err != nil {
				return err
			}
		}
		logNow, evalNow, ckptNow := r.cfg.due(r.step)
		evalNow = evalNow && r.task.Evaluates()
		if logNow || evalNow || ckptNow {
			if err := r.log(lr, evalNow); err != nil {
				return err
			}
		}
		stop := false
		if evalNow && r.step < r.cfg.Steps {
			if stop, err = r.stopEarly(); err != nil {
				return err
			}
		}
		if ckptNow || stop {
			if err := r.checkpoint(); err != nil {
				return err
			}
		}
		r.sum.Step = r.step
		if stop {
			r.sum.EarlyStopped = true
			break
		}
	}
	r.sum.finish(r.step, r.parts.Step.Traces(), r.start, r.tokensPerUpdate())
	r.sum.noteBest(r.best)
	return nil
}

// ready waits for this process's first update and reports the run's
// start (Hooks.OnReady): one wait, after which updates pipeline again.
func (r *run) ready() error {
	if err := r.parts.State.Eval(); err != nil {
		return err
	}
	r.startup.FirstUpdate = time.Since(r.start)
	if r.lead() && r.hooks.OnReady != nil {
		r.hooks.OnReady(r.startup)
	}
	return nil
}

// initialEval measures and logs the held-out loss of a fresh run's initial
// parameters, as step 0.
func (r *run) initialEval() error {
	if r.cfg.EvalEvery == 0 || r.step != 0 || !r.lead() || !r.task.Evaluates() {
		return nil
	}
	m := Metrics{Step: 0, Loss: math.NaN(), LR: r.parts.Schedule.LR(0)}
	v, err := r.task.Evaluate(&m)
	if err != nil {
		return err
	}
	r.sum.InitialValLoss, r.sum.ValLoss = v, v
	if err := r.noteEval(v); err != nil {
		return err
	}
	r.sum.InitialValAux, r.sum.ValAux, r.sum.ValRows = m.ValAux, m.ValAux, m.ValRows
	return r.sink.Log(m)
}

// update schedules the next optimizer update on the task's next batch and
// returns its learning rate; it does not wait for the device.
func (r *run) update() (float64, error) {
	b, err := r.task.Next(r.step)
	if err != nil {
		return 0, feedError{err}
	}
	lr := r.parts.Schedule.LR(r.step)
	err = r.parts.State.UpdateAsync(lr, b)
	r.samplerState = r.task.Release(r.samplerState[:0])
	if err != nil {
		return 0, err
	}
	r.step++
	r.tokensSeen += int64(r.tokensPerUpdate())
	return lr, nil
}

// feedError is an error of the task's next batch: of reading data, or of
// an online objective's generation and rewards.
type feedError struct{ err error }

func (e feedError) Error() string { return e.err.Error() }
func (e feedError) Unwrap() error { return e.err }

// stopOnFeedError ends a run whose next batch failed with err after
// checkpointing the updates done, so that a failing reward program or an
// interrupted rollout loses no training: cancelled, it stops as an
// interrupted run does; otherwise it returns err naming the checkpoint.
func (r *run) stopOnFeedError(ctx context.Context, err error) error {
	if r.step == 0 {
		return fmt.Errorf("step 1: %w", err)
	}
	if cerr := r.checkpoint(); cerr != nil {
		return fmt.Errorf("step %d: %w (and its checkpoint: %v)", r.step+1, err, cerr)
	}
	r.sum.Step, r.sum.Elapsed = r.step, time.Since(r.start)
	r.sum.noteBest(r.best)
	if ctx.Err() != nil {
		return fmt.Errorf("at step %d: %w", r.step, ErrInterrupted)
	}
	return fmt.Errorf("step %d: %w; the %d updates before it are checkpointed in %s (resume from there)", r.step+1, err, r.step, r.lastGood())
}

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
// asked, and writes the metrics line. Every rank checks the values, so
// every rank stops at the same step; rank 0 alone evaluates and writes.
func (r *run) log(lr float64, eval bool) error {
	st, err := r.parts.State.Stats()
	if err != nil {
		return err
	}
	mean, counted, _, err := r.parts.State.IntervalLoss()
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
		MicroBatch: r.parts.Plan.MicroBatch, AccumSteps: r.parts.Plan.Steps}
	switch l := r.parts.Step.Layout(); {
	case l.Inputs == step.RowInputs: // the loss averages the weighted rows
		m.CountedRows = counted
	case r.parts.Step.Weighted(): // the loss averages the counted targets alone
		m.CountedTokens = counted
	}
	if names := r.parts.Step.Layout().Aux; len(names) > 0 {
		aux := r.parts.State.IntervalAux()
		m.Aux = make(map[string]float64, len(names))
		for i, name := range names {
			if i < len(aux) {
				m.Aux[name] = aux[i]
			}
		}
	}
	if om, ok := r.task.(MetricsTask); ok {
		for k, v := range om.TaskMetrics() {
			if m.Aux == nil {
				m.Aux = map[string]float64{}
			}
			m.Aux[k] = v
		}
	}
	if dt := now.Sub(r.lastLog).Seconds(); dt > 0 {
		m.StepsPerS = float64(r.step-r.lastLogStep) / dt
		m.TokensPerS = m.StepsPerS * float64(r.tokensPerUpdate())
		m.CountedTokensPerS = m.CountedTokens / dt
	}
	r.lastLog, r.lastLogStep = now, r.step
	r.sum.TokensPerS = m.TokensPerS
	if !r.lead() {
		return nil
	}
	if eval {
		v, err := r.task.Evaluate(&m)
		if err != nil {
			return err
		}
		r.sum.ValLoss, r.sum.ValAux, r.sum.ValRows = v, m.ValAux, m.ValRows
		if err := r.noteEval(v); err != nil {
			return err
		}
	}
	m.PeakMemoryBytes = mlx.Memory().Peak
	if err := r.sink.Log(m); err != nil {
		return err
	}
	if r.hooks.OnLog != nil {
		r.hooks.OnLog(m)
	}
	return nil
}

// checkpoint saves the state after checking that it is finite: the loss
// checked so far was computed before the last update, and an update that
// overflowed shows only in the arrays about to be saved. Every rank
// checks; rank 0 alone saves.
func (r *run) checkpoint() error {
	bad, err := nonFiniteArrays(r.parts.Specs, r.parts.StateNames, r.parts.State.Params(), r.parts.State.OptState())
	if err != nil {
		return err
	}
	if bad != "" {
		r.sum.Elapsed = time.Since(r.start)
		return fmt.Errorf("step %d: %s is not finite; stopping without a checkpoint, the last good one is %s: %w",
			r.step, bad, r.lastGood(), ErrNonFinite)
	}
	if !r.lead() {
		return nil
	}
	root := checkpoint.Root(r.env.RunDir)
	dir, err := r.task.Save(root, r.runState())
	if err != nil {
		return err
	}
	if err := checkpoint.Prune(root, r.cfg.KeepCheckpoints); err != nil {
		return fmt.Errorf("checkpoint: pruning: %w", err)
	}
	r.sum.LastCheckpoint = dir
	if r.hooks.OnCheckpoint != nil {
		r.hooks.OnCheckpoint(dir, r.step)
	}
	return nil
}

// lastGood names the checkpoint a diverged run falls back to.
func (r *run) lastGood() string {
	switch {
	case r.sum.LastCheckpoint != "":
		return r.sum.LastCheckpoint
	case r.env.ResumeFrom != "":
		return r.env.ResumeFrom
	}
	return "(none written yet)"
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
