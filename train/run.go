package train

import (
	"errors"
	"time"
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
// be nil. They are called on the MLX thread, inside RunLoop: they may use MLX,
// but must not wait for another goroutine that does, and the run waits for
// them.
type Hooks struct {
	OnStart      func(Start)
	OnLog        func(Metrics)
	OnCheckpoint func(dir string, step int)
	// OnReady is called once, when this process's first update has
	// completed, with what the run's start took (Startup).
	OnReady func(Startup)
}

// Startup is where the start of a run went, in this process: what a
// cold machine (kernels to compile) and a warm one differ in.
type Startup struct {
	// Open is the building of the run: its plan (Probe of it, 0 for a
	// plan given or taken from the plan cache), step, state and
	// evaluation.
	Open, Probe time.Duration
	PlanCached  bool
	// FirstEval is the held-out evaluation of a fresh run's initial
	// parameters, 0 when there is none; FirstUpdate the first update,
	// from its scheduling to its completion.
	FirstEval, FirstUpdate time.Duration
}

// Start describes a run as it begins.
type Start struct {
	Step, Steps   int // first update to run, total updates
	Params        int
	TokensPerStep int
	Resumed       string // checkpoint directory, "" for a fresh run
	Plan          Plan   // how each update runs its sequences
	Windows       string // where the training windows come from (pretrain.DescribeWindows)
}

// Summary is the outcome of a run (RunLoop).
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
	// InitialValAux and ValAux are the means of a fine-tune objective's
	// held-out metrics (Eval.Aux: a preference objective's rewards,
	// margin and accuracy) at the first and the last evaluation, over
	// ValRows rows (a preference objective's pairs); nil and 0 when not
	// measured.
	InitialValAux, ValAux map[string]float64
	ValRows               int
	// Best is the lowest held-out loss of the run (resumed runs included)
	// with its step and, under Config.KeepBest, its checkpoint; nil when
	// nothing was evaluated. EarlyStopped says the run stopped before
	// Config.Steps because the held-out loss had not improved for
	// Config.Patience evaluations.
	Best         *Best
	EarlyStopped bool
}
