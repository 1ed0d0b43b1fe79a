package train

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"time"

	"github.com/posttrainllm/posttrainllm/data"
	"github.com/posttrainllm/posttrainllm/mlx"
	"github.com/posttrainllm/posttrainllm/model"
	"github.com/posttrainllm/posttrainllm/optim"
)

// BenchOptions say how Bench measures a configuration.
type BenchOptions struct {
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
	Data *Dataset
}

// Validate reports options that cannot run.
func (o BenchOptions) Validate() error {
	if o.Warmup < 0 {
		return fmt.Errorf("bench: warm-up steps = %d, want >= 0", o.Warmup)
	}
	if o.Steps < 1 {
		return fmt.Errorf("bench: steps = %d, want >= 1", o.Steps)
	}
	return nil
}

// BenchResult is what Bench measured. Times are per optimizer update;
// host time runs from the start of a step (building the batch, uploading
// it, calling the step, which only records the lazy graph) to the return of
// that call, device time from there to the end of mlx.Eval of the step's
// outputs. The per-step figures are medians over the timed steps.
type BenchResult struct {
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
	WarmupSteps   int    `json:"warmup_steps"`
	Steps         int    `json:"steps"` // timed steps

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
	// PeakMemoryBytes is MLX's peak active memory over the timed steps;
	// ActiveMemoryBytes is the active memory after the last one (parameters,
	// optimizer state and the step's outputs).
	PeakMemoryBytes   uint64  `json:"peak_memory_bytes"`
	ActiveMemoryBytes uint64  `json:"active_memory_bytes"`
	LossFirst         float64 `json:"loss_first"` // first step run, warm-up included
	LossLast          float64 `json:"loss_last"`  // last timed step
	// GraphOps is the number of operations one step evaluates, counted on
	// the first step's graph before it runs, views (Reshape, Transpose,
	// Slice, Broadcast, …: no data moved) excluded. On a GPU nearly every
	// one is a kernel launch, and a small model's step is bound by those,
	// so it shows what compiling fuses away. MLX expands RMSNorm, RoPE and
	// attention into plain operations on the CPU, so counts differ by device.
	GraphOps int `json:"graph_ops"`
	// Round is the comparison round the result belongs to (BenchCompare), 0
	// for a single bench.
	Round int `json:"round,omitempty"`
}

// viewOps are MLX primitives that produce views or bookkeeping nodes and
// launch no kernel on a GPU.
var viewOps = map[string]bool{
	"Reshape": true, "Transpose": true, "Slice": true, "Broadcast": true, "BroadcastAxes": true,
	"Squeeze": true, "ExpandDims": true, "Split": true, "Flatten": true, "Unflatten": true,
	"AsStrided": true, "CustomTransforms": true, "StopGradient": true, "Depends": true,
}

// countOps counts the non-view operations behind outs.
func countOps(outs []*mlx.Array) (int, error) {
	ops, err := mlx.GraphOps(outs...)
	if err != nil {
		return 0, err
	}
	n := 0
	for name, c := range ops {
		if !viewOps[name] {
			n += c
		}
	}
	return n, nil
}

// syntheticTokens is the length of the random token stream a bench without
// data samples its windows from.
const syntheticTokens = 1 << 18

// Bench runs opts.Warmup untimed and opts.Steps timed optimizer updates of
// cfg on fresh parameters and reports their timing. The learning rate
// follows cfg's schedule over the bench's own steps (its warm-up shortened
// to at most half of them), so a compiled step must keep one trace while
// the rate changes. Every array a step replaces is freed at once, so memory
// stays flat however many steps run. Bench locks its goroutine to one OS
// thread: MLX state is per thread.
func Bench(cfg Config, opts BenchOptions) (BenchResult, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := opts.Validate(); err != nil {
		return BenchResult{}, err
	}
	cfg = cfg.WithDefaults()
	if cfg.Model.VocabSize == 0 {
		v, err := data.TokenizerVocabSize(cfg.Tokenizer)
		if err != nil {
			return BenchResult{}, err
		}
		cfg.Model.VocabSize = v
	}
	total := opts.Warmup + opts.Steps
	cfg.Steps, cfg.Warmup = total, min(cfg.Warmup, total/2)
	if err := cfg.Validate(); err != nil {
		return BenchResult{}, err
	}
	if err := cfg.CheckMemory(); err != nil {
		return BenchResult{}, err
	}
	if err := mlx.UseDevice(cfg.Device); err != nil {
		return BenchResult{}, err
	}
	m, err := model.New(cfg.Model)
	if err != nil {
		return BenchResult{}, err
	}
	cfg.Model = m.Config
	view, source, err := benchData(cfg, opts.Data)
	if err != nil {
		return BenchResult{}, err
	}
	res := BenchResult{
		Preset: opts.Label, Device: cfg.Device, Compile: cfg.Compile, Schedule: cfg.Schedule,
		Optimizer: cfg.Optimizer, Dtype: cfg.Model.Dtype, Accum: cfg.Accum, Batch: cfg.Batch,
		Context: cfg.Model.Context, TokensPerStep: cfg.TokensPerStep(), Params: cfg.Model.NumParams(),
		Data: source, WarmupSteps: opts.Warmup, Steps: opts.Steps,
	}
	r := &benchRun{cfg: cfg, model: m}
	defer r.free()
	if err := r.setup(view); err != nil {
		return res, err
	}
	total64, host, device := make([]float64, 0, opts.Steps), make([]float64, 0, opts.Steps), make([]float64, 0, opts.Steps)
	var timed time.Duration
	for i := 0; i < total; i++ {
		if i == opts.Warmup {
			mlx.ResetPeakMemory()
		}
		h, d, loss, err := r.step(i, &res.GraphOps)
		if err != nil {
			return res, fmt.Errorf("bench step %d: %w", i+1, err)
		}
		if i == 0 {
			res.LossFirst = loss
		}
		res.LossLast = loss
		if i >= opts.Warmup {
			timed += h + d
			total64 = append(total64, ms(h+d))
			host = append(host, ms(h))
			device = append(device, ms(d))
		}
	}
	mem := mlx.Memory()
	res.PeakMemoryBytes, res.ActiveMemoryBytes = mem.Peak, mem.Active
	res.Traces = r.stepFn.Traces()
	res.MsPerStepMedian = quantile(total64, 0.5)
	res.MsPerStepP10 = quantile(total64, 0.1)
	res.MsPerStepP90 = quantile(total64, 0.9)
	res.HostMsPerStep = quantile(host, 0.5)
	res.DeviceMsPerStep = quantile(device, 0.5)
	res.StepsPerS = float64(opts.Steps) / timed.Seconds()
	res.TokensPerS = res.StepsPerS * float64(res.TokensPerStep)
	return res, nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// benchData returns the view Bench samples windows from and names it.
func benchData(cfg Config, ds *Dataset) (data.View, string, error) {
	if ds != nil {
		if ds.Tokenizer.VocabSize() > cfg.Model.VocabSize {
			return data.View{}, "", fmt.Errorf("bench: the %s tokenizer's %d ids do not fit vocab_size %d",
				ds.Tokenizer.Name(), ds.Tokenizer.VocabSize(), cfg.Model.VocabSize)
		}
		name := cfg.Corpus
		if ds.Corpus != nil && ds.Corpus.Root != "" {
			name = ds.Corpus.Root
		}
		return ds.Train, name, nil
	}
	return data.NewTokens(syntheticStream(cfg.Model.VocabSize, max(syntheticTokens, 2*(cfg.Model.Context+1)), cfg.Seed)).All(),
		"synthetic", nil
}

// syntheticSuccessors is how many next tokens each token of the synthetic
// stream chooses among, so a model can learn it down to ln 4 nats.
const syntheticSuccessors = 4

// syntheticStream returns n seeded random tokens below vocab drawn from a
// random first-order Markov chain in which every token has
// syntheticSuccessors equally likely successors: random, yet learnable, so a
// bench's falling loss shows that the steps train.
func syntheticStream(vocab, n int, seed uint64) []int32 {
	rng := rand.New(rand.NewPCG(seed, 0x62656e6368)) // "bench"
	next := make([]int32, vocab*syntheticSuccessors)
	for i := range next {
		next[i] = int32(rng.IntN(vocab))
	}
	ids := make([]int32, n)
	ids[0] = int32(rng.IntN(vocab))
	for i := 1; i < n; i++ {
		ids[i] = next[int(ids[i-1])*syntheticSuccessors+rng.IntN(syntheticSuccessors)]
	}
	return ids
}

// benchRun holds one bench's model state between steps.
type benchRun struct {
	cfg           Config
	model         *model.TinyGPT
	params, state []*mlx.Array
	stepFn        *Step
	sched         optim.Schedule
	sampler       *data.Sampler
	batch         *data.Batch
}

func (r *benchRun) setup(view data.View) error {
	cfg := r.cfg
	opt, err := NewOptimizer(cfg, r.model.Specs)
	if err != nil {
		return err
	}
	if r.sched, err = NewSchedule(cfg); err != nil {
		return err
	}
	if r.params, err = r.model.Init(cfg.Seed); err != nil {
		return err
	}
	if r.state, err = opt.Init(); err != nil {
		return err
	}
	r.stepFn, err = NewStep(r.model.Loss, opt, len(r.params), len(r.state),
		RunStepOptions(cfg))
	if err != nil {
		return err
	}
	if r.sampler, err = data.NewSampler(view, cfg.Model.Context, cfg.Seed); err != nil {
		return err
	}
	r.batch, err = data.NewBatch(cfg.Accum, cfg.Batch, cfg.Model.Context)
	return err
}

// step runs update i and returns its host and device times and its loss.
// On the first step it also counts the step's operations into *ops, a
// count kept out of both times.
func (r *benchRun) step(i int, ops *int) (host, device time.Duration, loss float64, err error) {
	start := time.Now()
	if err := r.sampler.FillBatch(r.batch); err != nil {
		return 0, 0, 0, err
	}
	b := r.batch
	x := mlx.FromSlice(b.X, b.N, b.B, b.T)
	y := mlx.FromSlice(b.Y, b.N, b.B, b.T)
	lr := mlx.Scalar(r.sched.LR(i), mlx.Float32)
	res, err := r.stepFn.Run(r.params, r.state, lr, x, y)
	called := time.Now()
	mlx.Free(x, y, lr)
	if err != nil {
		return 0, 0, 0, err
	}
	outs := append(append(append([]*mlx.Array{}, res.Params...), res.State...), res.Loss, res.GradNorm)
	outs = append(outs, r.stepFn.Copies()...)
	if i == 0 {
		counting := time.Now()
		*ops, err = countOps(outs)
		called = called.Add(time.Since(counting))
	}
	if err == nil {
		err = mlx.Eval(outs...)
	}
	done := time.Now()
	mlx.Free(r.params...)
	mlx.Free(r.state...)
	r.params, r.state = res.Params, res.State
	if err == nil {
		loss, err = res.Loss.Item()
	}
	mlx.Free(res.Loss, res.GradNorm)
	if err != nil {
		return 0, 0, 0, err
	}
	if math.IsNaN(loss) || math.IsInf(loss, 0) {
		return 0, 0, 0, fmt.Errorf("loss is %v: %w", loss, ErrNonFinite)
	}
	return called.Sub(start), done.Sub(called), loss, nil
}

func (r *benchRun) free() {
	mlx.Free(r.params...)
	mlx.Free(r.state...)
	if r.stepFn != nil {
		r.stepFn.Free()
	}
	mlx.ClearCache()
}

// quantile returns the q-quantile of xs by linear interpolation between
// order statistics (xs is not modified).
func quantile(xs []float64, q float64) float64 {
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

// CompareCell is one configuration of a compile × schedule × accum matrix.
type CompareCell struct {
	Compile  bool
	Schedule string
	Accum    int
}

// CompareOptions choose the cells and rounds of BenchCompare. Empty lists
// mean the full matrix.
type CompareOptions struct {
	Schedules []string // default constant and cosine
	Accums    []int    // default 1 and 4
	// Rounds runs every cell this many times, round after round, so drift
	// of a shared machine hits compiled and interpreted cells alike; the
	// speedups are then medians of per-round ratios. Default 1.
	Rounds int
}

// Validate reports options BenchCompare cannot run.
func (o CompareOptions) Validate() error {
	if o.Rounds < 0 {
		return fmt.Errorf("bench: rounds = %d, want >= 1", o.Rounds)
	}
	for _, a := range o.Accums {
		if a < 1 {
			return fmt.Errorf("bench: compare accum = %d, want >= 1", a)
		}
	}
	return nil
}

// CompareMatrix is the matrix `bench --compare` runs: compile on and off ×
// the schedules × the accums (constant and cosine × 1 and 4 when empty),
// compiled and interpreted side by side.
func CompareMatrix(schedules []string, accums []int) []CompareCell {
	if len(schedules) == 0 {
		schedules = []string{"constant", "cosine"}
	}
	if len(accums) == 0 {
		accums = []int{1, 4}
	}
	var cells []CompareCell
	for _, accum := range accums {
		for _, sched := range schedules {
			for _, compile := range []bool{true, false} {
				cells = append(cells, CompareCell{Compile: compile, Schedule: sched, Accum: accum})
			}
		}
	}
	return cells
}

// Apply returns cfg set up for the cell, keeping the tokens per update of
// cfg: the batch becomes cfg.Batch·cfg.Accum / cell.Accum sequences.
func (c CompareCell) Apply(cfg Config) (Config, error) {
	cfg = cfg.WithDefaults()
	seqs := cfg.Batch * cfg.Accum
	if seqs%c.Accum != 0 {
		return cfg, fmt.Errorf("bench: %d sequences per update (batch %d × accum %d) do not split into accum %d microbatches",
			seqs, cfg.Batch, cfg.Accum, c.Accum)
	}
	cfg.Compile, cfg.Schedule, cfg.Accum, cfg.Batch = c.Compile, c.Schedule, c.Accum, seqs/c.Accum
	return cfg, nil
}

// BenchCompare runs Bench for every cell of the comparison matrix in this
// process, in order, copts.Rounds times over, calling each (when not nil)
// as a cell finishes. Results carry their round (from 1).
func BenchCompare(cfg Config, opts BenchOptions, copts CompareOptions, each func(BenchResult)) ([]BenchResult, error) {
	if err := copts.Validate(); err != nil {
		return nil, err
	}
	var out []BenchResult
	for round := 1; round <= max(copts.Rounds, 1); round++ {
		for _, cell := range CompareMatrix(copts.Schedules, copts.Accums) {
			c, err := cell.Apply(cfg)
			if err != nil {
				return out, err
			}
			res, err := Bench(c, opts)
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

// Speedup pairs the compiled and interpreted results of each schedule,
// accum and round in results and compares their times, one row per
// schedule and accum in the order they first appear: with several rounds,
// the row's times are medians over rounds and its speedups the median
// (and range) of the per-round ratios.
func Speedup(results []BenchResult) ([]SpeedupRow, error) {
	type key struct {
		sched string
		accum int
	}
	type pair struct{ comp, interp *BenchResult }
	pairs := map[key]map[int]*pair{}
	var order []key
	for i := range results {
		r := &results[i]
		k := key{r.Schedule, r.Accum}
		if pairs[k] == nil {
			pairs[k] = map[int]*pair{}
			order = append(order, k)
		}
		p := pairs[k][r.Round]
		if p == nil {
			p = &pair{}
			pairs[k][r.Round] = p
		}
		if r.Compile {
			p.comp = r
		} else {
			p.interp = r
		}
	}
	var rows []SpeedupRow
	for _, k := range order {
		var comp, interp, ratio, host []float64
		batch := 0
		for _, p := range pairs[k] {
			if p.comp == nil || p.interp == nil {
				continue
			}
			batch = p.comp.Batch
			comp = append(comp, p.comp.MsPerStepMedian)
			interp = append(interp, p.interp.MsPerStepMedian)
			ratio = append(ratio, p.interp.MsPerStepMedian/p.comp.MsPerStepMedian)
			host = append(host, p.interp.HostMsPerStep/p.comp.HostMsPerStep)
		}
		if len(ratio) == 0 {
			continue
		}
		rows = append(rows, SpeedupRow{Schedule: k.sched, Accum: k.accum, Batch: batch, Rounds: len(ratio),
			Compiled: quantile(comp, 0.5), Interpreted: quantile(interp, 0.5),
			Speedup: quantile(ratio, 0.5), MinSpeedup: slices.Min(ratio), MaxSpeedup: slices.Max(ratio),
			HostSpeedup: quantile(host, 0.5)})
	}
	if len(rows) == 0 {
		return nil, errors.New("bench: no schedule/accum pair has both a compiled and an interpreted result")
	}
	return rows, nil
}

// SpeedupRow compares the compiled and the interpreted step of one
// schedule and accum: Speedup is interpreted ÷ compiled median ms/step
// (the median over Rounds rounds, MinSpeedup and MaxSpeedup its range),
// HostSpeedup the same for host time.
type SpeedupRow struct {
	Schedule               string
	Accum, Batch, Rounds   int
	Compiled, Interpreted  float64 // median ms/step (median over rounds)
	Speedup, HostSpeedup   float64
	MinSpeedup, MaxSpeedup float64
}
