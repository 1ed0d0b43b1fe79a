// Package bench is posttrainllm's benchmark harness: it times the
// optimizer updates of a training configuration (host and device time,
// percentiles, memory, graph size) and runs cells of a comparison matrix,
// on the same setup path as pretrain.Trainer.
package bench

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/posttrainllm/posttrainllm/data"
	"github.com/posttrainllm/posttrainllm/mlx"
	"github.com/posttrainllm/posttrainllm/model"
	"github.com/posttrainllm/posttrainllm/pretrain"
	"github.com/posttrainllm/posttrainllm/step"
	"github.com/posttrainllm/posttrainllm/train"
)

// Options say how Run measures a configuration.
type Options struct {
	// Label names the measured configuration (a preset name) in the result.
	Label string
	// Warmup steps run first and are not timed: the first compiled call
	// traces the step, and MLX's CPU backend JIT-compiles its fused kernels
	// with the system C++ compiler on first use.
	Warmup int
	// Steps is the number of timed steps.
	Steps int
	// Data supplies real training windows; nil draws them from a seeded
	// stream of random tokens (see syntheticStream), so a bench needs no
	// corpus.
	Data *pretrain.Dataset
	// Group makes this process one rank of a data-parallel run: the
	// step averages gradients across it, each rank draws its shard of the
	// windows, and tokens per step and per second count every rank's.
	// nil measures one process.
	Group *mlx.Group
	// Pipelined also times Steps updates run as pretrain.Trainer runs them,
	// after the timed ones (Result.PipelinedMsPerStep).
	Pipelined bool
}

// Validate reports options that cannot run.
func (o Options) Validate() error {
	if o.Warmup < 0 {
		return fmt.Errorf("bench: warm-up steps = %d, want >= 0", o.Warmup)
	}
	if o.Steps < 1 {
		return fmt.Errorf("bench: steps = %d, want >= 1", o.Steps)
	}
	return nil
}

// Result is what Run measured. Times are per optimizer update;
// host time runs from the start of a step (drawing the batch, uploading
// it, calling the step, which only records the lazy graph: State.Apply) to
// the return of that call, device time from there to the end of its
// evaluation (State.Eval). The per-step figures are medians over the timed steps.
type Result struct {
	Preset        string `json:"preset"`
	Device        string `json:"device"`
	Compile       bool   `json:"compile"`
	Schedule      string `json:"schedule"`
	Optimizer     string `json:"optimizer"`
	Dtype         string `json:"dtype"`
	Accum         int    `json:"accum"`
	Batch         int    `json:"batch"`
	Context       int    `json:"context"`
	TokensPerStep int    `json:"tokens_per_step"`
	Params        int    `json:"params"`
	Data          string `json:"data"` // "synthetic" or the corpus path
	// Windows is where the updates' token windows were made, as a
	// training run of the config makes them (train.WindowSource):
	// "device" (gathered from a token stream there) or "host".
	Windows     string `json:"windows"`
	WarmupSteps int    `json:"warmup_steps"`
	Steps       int    `json:"steps"` // timed steps
	// Ranks is the number of data-parallel processes that ran the
	// steps together (Options.Group); TokensPerStep counts all of them.
	Ranks int `json:"ranks"`

	// MicroBatch and AccumSteps are the plan the step ran (train.Plan):
	// AccumSteps forward passes of MicroBatch sequences per update, for
	// the batch × accum sequences that make it. PlanHow says how the plan
	// was chosen, MemoryBudgetBytes is the budget in force (only a probed
	// plan is held to it) and ProbePeakBytes the probe's measured peak
	// for the chosen step (probed plans only).
	MicroBatch        int    `json:"micro_batch"`
	AccumSteps        int    `json:"accum_steps"`
	PlanHow           string `json:"plan"`
	MemoryBudgetBytes uint64 `json:"memory_budget_bytes,omitempty"`
	ProbePeakBytes    uint64 `json:"probe_peak_bytes,omitempty"`

	MsPerStepMedian float64 `json:"ms_per_step_median"`
	MsPerStepP10    float64 `json:"ms_per_step_p10"`
	MsPerStepP90    float64 `json:"ms_per_step_p90"`
	StepsPerS       float64 `json:"steps_per_s"` // timed steps / their total time
	TokensPerS      float64 `json:"tokens_per_s"`
	// Traces counts how often the step's Go body ran: 1 for a compiled
	// step with static shapes, one per step when interpreted.
	Traces          int     `json:"traces"`
	HostMsPerStep   float64 `json:"host_ms_per_step"`
	DeviceMsPerStep float64 `json:"device_ms_per_step"`
	// CPUMsPerStep is the CPU time the process used over the timed steps
	// (user and system, all threads), divided by their number. On a shared
	// machine it moves less with other jobs' load than the wall-clock
	// times; compare it between implementations (bench/peers/compare.py).
	CPUMsPerStep float64 `json:"cpu_ms_per_step"`
	// PeakMemoryBytes is MLX's peak active memory over the timed steps;
	// ActiveMemoryBytes is the active memory after the last one (parameters,
	// optimizer state and the step's outputs).
	PeakMemoryBytes   uint64 `json:"peak_memory_bytes"`
	ActiveMemoryBytes uint64 `json:"active_memory_bytes"`
	// PipelinedMsPerStep (with Options.Pipelined; 0 without) is the wall
	// time per update of Steps more updates run after the timed ones the
	// way pretrain.Trainer runs them: each is scheduled while the one before
	// computes (State.UpdateAsync) and the loss is read back every
	// LogEvery updates and after the last, so the host records update i+1
	// while the device computes update i. It is what training on the same
	// data (Options.Data) gets; the per-step times above wait for every
	// update and so add the host's time to the device's. PipelinedPeakMemoryBytes is MLX's peak active
	// memory over those updates: the buffers of the update being scheduled
	// are allocated while the one before still holds its own.
	PipelinedMsPerStep       float64 `json:"ms_per_step_pipelined"`
	PipelinedPeakMemoryBytes uint64  `json:"peak_memory_bytes_pipelined"`
	LossFirst                float64 `json:"loss_first"` // first step run, warm-up included
	LossLast                 float64 `json:"loss_last"`  // last timed step
	// GraphOps is the number of operations one step evaluates, counted on
	// the second step's graph before it runs (countedUpdate), views (Reshape, Transpose,
	// Slice, Broadcast, …: no data moved) excluded. On a GPU nearly every
	// one is a kernel launch, and a small model's step is bound by those,
	// so it shows what compiling fuses away. MLX expands RMSNorm, RoPE and
	// attention into plain operations on the CPU, so counts differ by device.
	GraphOps int `json:"graph_ops"`
	// GraphOpsByPrimitive is the same count by MLX primitive name, views
	// included, so a step's graph can be set beside another
	// implementation's (bench/peers/cpp_peer.cpp --graph-ops 1).
	GraphOpsByPrimitive map[string]int `json:"graph_ops_by_primitive,omitempty"`
	// Round is the comparison round the result belongs to (Compare), 0 for
	// a single run.
	Round int `json:"round,omitempty"`
}

// syntheticTokens is the length of the random token stream a bench without
// data samples its windows from.
const syntheticTokens = 1 << 18

// prepare checks opts and prepares cfg for a bench of opts.Warmup +
// opts.Steps updates: the run is that long, its learning-rate warm-up at
// most half of it.
func prepare(cfg train.Config, opts Options) (train.Config, *model.Transformer, error) {
	if err := opts.Validate(); err != nil {
		return cfg, nil, err
	}
	cfg = cfg.WithDefaults()
	total := opts.Warmup + opts.Steps
	cfg.Steps, cfg.Warmup = total, min(cfg.Warmup, total/2)
	return train.Prepare(cfg)
}

// Run runs opts.Warmup untimed and opts.Steps timed optimizer updates of
// cfg on fresh parameters and reports their timing. The learning rate
// follows cfg's schedule over the bench's own steps (its warm-up shortened
// to at most half of them), so a compiled step must keep one trace while
// the rate changes. Every array a step replaces is freed at once, so memory
// stays flat however many steps run. The updates run on the MLX thread
// (mlx.Do).
func Run(cfg train.Config, opts Options) (Result, error) {
	cfg, m, err := prepare(cfg, opts)
	if err != nil {
		return Result{}, err
	}
	view, source, err := benchData(cfg, opts.Data)
	if err != nil {
		return Result{}, err
	}
	res := Result{
		Preset: opts.Label, Device: cfg.Device, Compile: cfg.Compile, Schedule: cfg.Schedule,
		Optimizer: cfg.Optimizer, Dtype: cfg.Model.Dtype, Accum: cfg.Accum, Batch: cfg.Batch,
		Context: cfg.Model.Context, TokensPerStep: cfg.TokensPerStep() * opts.Group.Size(), Params: cfg.Model.NumParams(),
		Data: source, WarmupSteps: opts.Warmup, Steps: opts.Steps, Ranks: opts.Group.Size(),
	}
	err = mlx.Do(func() error {
		unlimit, err := train.LimitMemory(cfg)
		if err != nil {
			return err
		}
		defer unlimit()
		s, err := train.NewGroupSetup(cfg, m, "", opts.Group)
		if err != nil {
			return err
		}
		defer mlx.ClearCache()
		defer s.Free()
		return measure(s, view, opts, &res)
	})
	return res, err
}

// measure runs the bench's updates on s and fills in res.
func measure(s *train.Setup, view data.View, opts Options, res *Result) error {
	cfg := s.Config
	sampler, err := data.NewSampler(view, cfg.Model.Context, cfg.Seed)
	if err != nil {
		return err
	}
	if g := opts.Group; g.Size() > 1 {
		if err := sampler.Shard(g.Rank(), g.Size(), cfg.Batch); err != nil {
			return err
		}
	}
	// BPE-dropout re-tokenises in the fill, so its cost shows in host time.
	if err := pretrain.SetBPEDropout(sampler, cfg); err != nil {
		return err
	}
	in, err := newInputs(cfg, s.Plan, view)
	if err != nil {
		return err
	}
	defer in.stream.Free()
	res.Windows = "host"
	if in.stream != nil {
		res.Windows = "device"
	}
	p := s.Plan
	res.MicroBatch, res.AccumSteps, res.PlanHow, res.MemoryBudgetBytes, res.ProbePeakBytes =
		p.MicroBatch, p.Steps, p.How, p.BudgetBytes, p.PeakBytes
	total := opts.Warmup + opts.Steps
	all, host, device := make([]float64, 0, opts.Steps), make([]float64, 0, opts.Steps), make([]float64, 0, opts.Steps)
	var timed, cpuStart time.Duration
	for i := 0; i < total; i++ {
		if i == opts.Warmup {
			mlx.ResetPeakMemory()
			cpuStart = processCPUTime()
		}
		h, d, loss, err := runUpdate(s, sampler, in, i, i == countedUpdate(total), res)
		if err != nil {
			return fmt.Errorf("bench step %d: %w", i+1, err)
		}
		if i == 0 {
			res.LossFirst = loss
		}
		res.LossLast = loss
		if i >= opts.Warmup {
			timed += h + d
			all = append(all, ms(h+d))
			host = append(host, ms(h))
			device = append(device, ms(d))
		}
	}
	res.CPUMsPerStep = ms(processCPUTime()-cpuStart) / float64(opts.Steps)
	mem := mlx.Memory()
	res.PeakMemoryBytes, res.ActiveMemoryBytes = mem.Peak, mem.Active
	res.Traces = s.Step.Traces()
	res.MsPerStepMedian = Quantile(all, 0.5)
	res.MsPerStepP10 = Quantile(all, 0.1)
	res.MsPerStepP90 = Quantile(all, 0.9)
	res.HostMsPerStep = Quantile(host, 0.5)
	res.DeviceMsPerStep = Quantile(device, 0.5)
	res.StepsPerS = float64(opts.Steps) / timed.Seconds()
	res.TokensPerS = res.StepsPerS * float64(res.TokensPerStep)
	if !opts.Pipelined {
		return nil
	}
	// The timed steps' learning rates again.
	return pipelined(s.State, opts, cfg.LogEvery, func(i int) float64 { return s.Schedule.LR(opts.Warmup + i) },
		func(int) (step.Batch, error) {
			if err := sampler.FillBatch(in.batch); err != nil {
				return step.Batch{}, err
			}
			return in.of(), nil
		}, res)
}

// inputs is how a bench's batches reach the step, as in a training run
// of the same config (train.WindowSource): token windows filled on the
// host, or window starts into a token stream on the device.
type inputs struct {
	batch  *data.Batch
	stream *step.TokenStream // nil: batch holds tokens
}

// newInputs allocates the batch of plan's shape for windows of view, and
// the token stream when the windows are gathered on the device.
func newInputs(cfg train.Config, plan train.Plan, view data.View) (inputs, error) {
	if device, _ := train.WindowSource(cfg, view.Len()); !device {
		b, err := plan.NewBatch(cfg.Model.Context)
		return inputs{batch: b}, err
	}
	b, err := data.NewStartsBatch(plan.Steps, plan.MicroBatch, cfg.Model.Context)
	if err != nil {
		return inputs{}, err
	}
	stream, err := step.NewTokenStream(view, cfg.Model.Context)
	return inputs{batch: b, stream: stream}, err
}

// of views the batch, as last filled, as the step's Batch.
func (in inputs) of() step.Batch {
	if in.stream != nil {
		return in.stream.Batch(in.batch)
	}
	return step.BatchOf(in.batch)
}

// pipelined runs opts.Steps more updates on st as pretrain.Trainer runs them
// and fills in res.PipelinedMsPerStep and res.PipelinedPeakMemoryBytes:
// update i takes next(i)'s batch and learning rate lr(i) and is scheduled
// (State.UpdateAsync), and the loss is read back (State.Stats, which
// waits) every `every` updates and after the last; the time ends when the
// last update is wholly computed.
func pipelined(st *step.State, opts Options, every int, lr func(i int) float64, next func(i int) (step.Batch, error), res *Result) error {
	if _, err := st.Stats(); err != nil { // nothing of the timed steps still running
		return err
	}
	mlx.ResetPeakMemory()
	every = max(every, 1)
	start := time.Now()
	for i := range opts.Steps {
		b, err := next(i)
		if err != nil {
			return fmt.Errorf("bench pipelined step %d: %w", i+1, err)
		}
		if err := st.UpdateAsync(lr(i), b); err != nil {
			return fmt.Errorf("bench pipelined step %d: %w", i+1, err)
		}
		if (i+1)%every != 0 && i != opts.Steps-1 {
			continue
		}
		stats, err := st.Stats()
		if err != nil {
			return fmt.Errorf("bench pipelined step %d: %w", i+1, err)
		}
		if err := finiteLoss(stats.Loss); err != nil {
			return fmt.Errorf("bench pipelined step %d: %w", i+1, err)
		}
	}
	if err := st.Eval(); err != nil { // the last update's optimizer state too
		return err
	}
	res.PipelinedMsPerStep = ms(time.Since(start)) / float64(opts.Steps)
	res.PipelinedPeakMemoryBytes = mlx.Memory().Peak
	return nil
}

// countedUpdate is the update of a run of total whose graph a bench
// counts (Result.GraphOps): the second, which holds one update's work. The
// first update's graph also computes the initial state (fresh parameters,
// zero moments and their packing into the flat layout: on the huge preset
// about 200 operations that never run again).
func countedUpdate(total int) int { return min(1, total-1) }

// runUpdate runs update i and returns its host and device times and its loss.
// With count it also counts the operations the update evaluates into
// res.GraphOps and res.GraphOpsByPrimitive, a count kept out of both
// times.
func runUpdate(s *train.Setup, sampler *data.Sampler, in inputs, i int, count bool, res *Result) (host, device time.Duration, loss float64, err error) {
	start := time.Now()
	if err := sampler.FillBatch(in.batch); err != nil {
		return 0, 0, 0, err
	}
	if err := s.State.Apply(s.Schedule.LR(i), in.of()); err != nil {
		return 0, 0, 0, err
	}
	called := time.Now()
	if count {
		byOp, err := s.State.GraphOps()
		if err != nil {
			return 0, 0, 0, err
		}
		res.GraphOps, res.GraphOpsByPrimitive = mlx.CountKernelOps(byOp), byOp
		counting := time.Since(called)
		start, called = start.Add(counting), called.Add(counting)
	}
	if err := s.State.Eval(); err != nil {
		return 0, 0, 0, err
	}
	done := time.Now()
	st, err := s.State.Stats()
	if err != nil {
		return 0, 0, 0, err
	}
	if err := finiteLoss(st.Loss); err != nil {
		return 0, 0, 0, err
	}
	return called.Sub(start), done.Sub(called), st.Loss, nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// finiteLoss refuses a loss that is NaN or infinite: a bench of a
// diverged run measures nothing.
func finiteLoss(loss float64) error {
	if math.IsNaN(loss) || math.IsInf(loss, 0) {
		return fmt.Errorf("loss is %v: %w", loss, train.ErrNonFinite)
	}
	return nil
}

// Quantile returns the q-quantile of xs by linear interpolation between
// order statistics (xs is not modified; NaN when xs is empty).
func Quantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	pos := q * float64(len(s)-1)
	lo := int(math.Floor(pos))
	hi := min(lo+1, len(s)-1)
	return s[lo] + (s[hi]-s[lo])*(pos-float64(lo))
}

// Cell is one configuration of a comparison: compiled or interpreted, a
// schedule and an accumulation.
type Cell struct {
	Compile  bool
	Schedule string
	Accum    int
}

// Apply returns cfg set up for the cell, keeping the tokens per update of
// cfg: the batch becomes cfg.Batch·cfg.Accum / cell.Accum sequences, and
// the cell runs them as that batch × accum (its micro-batch is forced to
// the batch, so an automatic plan cannot fold the accumulation away).
func (c Cell) Apply(cfg train.Config) (train.Config, error) {
	cfg = cfg.WithDefaults()
	if c.Accum < 1 {
		return cfg, fmt.Errorf("bench: cell accum = %d, want >= 1", c.Accum)
	}
	seqs := cfg.Batch * cfg.Accum
	if seqs%c.Accum != 0 {
		return cfg, fmt.Errorf("bench: %d sequences per update (batch %d × accum %d) do not split into accum %d microbatches",
			seqs, cfg.Batch, cfg.Accum, c.Accum)
	}
	cfg.Compile, cfg.Schedule, cfg.Accum, cfg.Batch = c.Compile, c.Schedule, c.Accum, seqs/c.Accum
	cfg.MicroBatch = cfg.Batch
	return cfg, nil
}

// Compare runs Run for every cell in this process, in order, rounds times
// over, so drift of a shared machine hits every cell alike, calling each
// (when not nil) as a cell finishes. Results carry their round (from 1).
func Compare(cfg train.Config, opts Options, cells []Cell, rounds int, each func(Result)) ([]Result, error) {
	if rounds < 1 {
		return nil, fmt.Errorf("bench: rounds = %d, want >= 1", rounds)
	}
	if len(cells) == 0 {
		return nil, errors.New("bench: no cells to compare")
	}
	configs := make([]train.Config, len(cells))
	for i, cell := range cells {
		c, err := cell.Apply(cfg)
		if err != nil {
			return nil, err
		}
		configs[i] = c
	}
	var out []Result
	for round := 1; round <= rounds; round++ {
		for i, cell := range cells {
			res, err := Run(configs[i], opts)
			if err != nil {
				return out, fmt.Errorf("round %d, compile=%t schedule=%s accum=%d: %w", round, cell.Compile, cell.Schedule, cell.Accum, err)
			}
			res.Round = round
			out = append(out, res)
			if each != nil {
				each(res)
			}
		}
	}
	return out, nil
}
