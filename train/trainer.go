package train

import (
	"context"
	"errors"
	"fmt"
	"time"

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
// until Config.Steps updates are done or ctx is cancelled (then it writes
// a checkpoint and returns ErrInterrupted). It runs on the MLX thread
// (mlx.Do), and so do the Hooks it calls: they may use MLX, but must not
// wait for another goroutine that does.
func (t *Trainer) Run(ctx context.Context, resumeFrom string) (Summary, error) {
	env := TaskEnv{Config: t.Config, RunDir: t.RunDir, ResumeFrom: resumeFrom, Group: t.Group}
	return RunLoop(ctx, &pretrainTask{t: t}, env, t.Hooks)
}
