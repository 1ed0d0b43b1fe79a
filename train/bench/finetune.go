package bench

import (
	"fmt"
	"time"

	"github.com/posttrainllm/posttrainllm/finetune"
	"github.com/posttrainllm/posttrainllm/mlx"
	"github.com/posttrainllm/posttrainllm/model"
	"github.com/posttrainllm/posttrainllm/optim"
	"github.com/posttrainllm/posttrainllm/peft"
	"github.com/posttrainllm/posttrainllm/step"
	"github.com/posttrainllm/posttrainllm/train"
)

// FineTune says which fine-tune step RunFineTune measures.
type FineTune struct {
	// Method is finetune.MethodLoRA, MethodDoRA or MethodFull.
	Method string
	// Adapter shapes the adapters of LoRA and DoRA (its Method is set
	// from Method).
	Adapter peft.Config
	// Objective is a preference objective to time instead of the
	// supervised loss (its zero value, or finetune.SFT): the row step of
	// finetune.PreferenceLoss or finetune.AdapterPreferenceLoss on the same
	// windows taken as pairs (rows 2i and 2i+1), so the batch must be
	// even. A full fine-tune's DPO and IPO read reference log-probabilities
	// as a row input, here constants: the one pass that computes them
	// before training is not part of the step.
	Objective finetune.Preference
}

// prefers reports whether ft times a preference objective.
func (ft FineTune) prefers() bool {
	return ft.Objective.Objective != "" && ft.Objective.Objective != finetune.SFT
}

// RunFineTune times the fine-tune step of cfg's model, as Run times the
// pretraining step: opts.Warmup untimed and opts.Steps timed updates of
// the step of the fine-tune objective (finetune.Objective) on freshly initialised base
// weights, LoRA/DoRA adapters trainable and the base frozen, or every
// weight trainable for a full fine-tune. The data are synthetic windows
// whose first half of positions is masked out of the loss, as a prompt
// would be. Result.Preset is opts.Label with the method appended
// ("tiny/lora") and Result.Params the trainable parameters.
func RunFineTune(cfg train.Config, ft FineTune, opts Options) (Result, error) {
	cfg, m, err := prepare(cfg, opts)
	if err != nil {
		return Result{}, err
	}
	preset := opts.Label + "/" + ft.Method
	if ft.prefers() {
		ft.Objective = ft.Objective.WithDefaults()
		if err := ft.Objective.Validate(); err != nil {
			return Result{}, err
		}
		if cfg.Batch%2 != 0 {
			return Result{}, fmt.Errorf("bench: batch %d for objective %s, want an even batch (pairs of rows)", cfg.Batch, ft.Objective.Objective)
		}
		preset += "/" + string(ft.Objective.Objective)
	}
	res := Result{
		Preset: preset, Device: cfg.Device, Compile: cfg.Compile, Schedule: cfg.Schedule,
		Optimizer: cfg.Optimizer, Dtype: cfg.Model.Dtype, Accum: cfg.Accum, Batch: cfg.Batch,
		Context: cfg.Model.Context, TokensPerStep: cfg.TokensPerStep(), Params: cfg.Model.NumParams(),
		Data: "synthetic, first half of each window masked", WarmupSteps: opts.Warmup, Steps: opts.Steps,
		MicroBatch: cfg.Batch, AccumSteps: cfg.Accum, PlanHow: train.PlanForced,
	}
	err = mlx.Do(func() error {
		if err := mlx.UseDevice(cfg.Device); err != nil {
			return err
		}
		unlimit, err := train.LimitMemory(cfg)
		if err != nil {
			return err
		}
		defer unlimit()
		state, update, trainable, err := fineTuneState(cfg, m, ft)
		if err != nil {
			return err
		}
		defer mlx.ClearCache()
		defer update.Free()
		defer state.Free()
		res.Params = trainable
		sched, err := train.NewSchedule(cfg)
		if err != nil {
			return err
		}
		return measureFineTune(state, update, sched, cfg, opts, ft, &res)
	})
	return res, err
}

// fineTuneState builds the weighted step and its state, and counts the
// trainable parameters.
func fineTuneState(cfg train.Config, m *model.Transformer, ft FineTune) (*step.State, *step.Step, int, error) {
	base, err := m.Init(cfg.Seed)
	if err != nil {
		return nil, nil, 0, err
	}
	var (
		opt       optim.Optimizer
		policy    finetune.Policy
		trainable []*mlx.Array
		frozen    []*mlx.Array
		count     int
	)
	opts := train.RunStepOptions(cfg)
	switch ft.Method {
	case finetune.MethodFull:
		if opt, err = train.NewOptimizer(cfg, m.Specs); err == nil {
			policy, trainable, count = finetune.Policy{Model: m}, base, cfg.Model.NumParams()
		}
	case finetune.MethodLoRA, finetune.MethodDoRA:
		ac := ft.Adapter
		ac.Method = peft.Method(ft.Method)
		var a *peft.Adapter
		if a, err = finetune.NewAdapter(cfg, ac, m.Specs); err == nil {
			opt, err = train.NewOptimizerFor(cfg, finetune.AdapterOptimizerParams(a))
		}
		if err == nil {
			err = finetune.CastFrozenBase(cfg, base)
		}
		if err == nil {
			trainable, err = a.Init(cfg.Seed+1, base)
		}
		if err == nil {
			policy, frozen, count = finetune.Policy{Model: m, Adapter: a}, base, a.NumParams()
		}
		opts = finetune.AdapterStepOptions(opts, cfg.Model)
	default:
		err = fmt.Errorf("bench: fine-tune method %q, want lora, dora or full", ft.Method)
	}
	if err != nil {
		mlx.Free(base...)
		return nil, nil, 0, err
	}
	optState, err := opt.Init()
	var obj finetune.Objective = finetune.SupervisedObjective{}
	if ft.prefers() {
		obj = finetune.PreferenceObjective{Preference: ft.Objective}
	}
	var update *step.Step
	if err == nil {
		layout := obj.Layout(policy)
		layout.Trainable, layout.Frozen, layout.State = len(trainable), len(frozen), len(optState)
		update, err = step.NewStep(obj.Loss(policy), opt, layout, opts)
	}
	var state *step.State
	if err == nil {
		state, err = step.NewFrozenState(update, trainable, frozen, optState)
	}
	if err != nil {
		update.Free()
		mlx.Free(optState...)
		mlx.Free(base...)
		if ft.Method != finetune.MethodFull {
			mlx.Free(trainable...)
		}
		return nil, nil, 0, err
	}
	return state, update, count, nil
}

// fullReference is the number of row inputs after the row weights that
// ft's preference step takes: the reference log-probabilities of a full
// fine-tune's DPO or IPO.
func fullReference(ft FineTune) int {
	if ft.Method == finetune.MethodFull && ft.Objective.NeedsReference() {
		return 1
	}
	return 0
}

// measureFineTune runs the updates and fills in res, as measure does.
func measureFineTune(st *step.State, update *step.Step, sched optim.Schedule, cfg train.Config, opts Options, ft FineTune, res *Result) error {
	N, B, T := cfg.Accum, cfg.Batch, cfg.Model.Context
	stream := syntheticStream(cfg.Model.VocabSize, max(syntheticTokens, 2*(T+1)), cfg.Seed)
	x, y, w := make([]int32, N*B*T), make([]int32, N*B*T), make([]float32, N*B*T)
	for p := range w {
		if p%T >= T/2 {
			w[p] = 1
		}
	}
	var rowW []float32
	var rowInputs [][]float32
	if ft.prefers() {
		rowW = make([]float32, N*B)
		for r := range rowW {
			rowW[r] = float32(1 - r%2) // each pair's weight on its chosen row
		}
		if fullReference(ft) > 0 {
			ref := make([]float32, N*B)
			for r := range ref {
				ref[r] = -float32(T/2) * 5 // about log(vocab) per counted token
			}
			rowInputs = [][]float32{ref}
		}
	}
	windows := (len(stream) - 1) / T
	// fill returns update i's batch: windows of the stream in turn.
	fill := func(i int) step.Batch {
		for r := 0; r < N*B; r++ {
			off := ((i*N*B + r) % windows) * T
			copy(x[r*T:(r+1)*T], stream[off:off+T])
			copy(y[r*T:(r+1)*T], stream[off+1:off+T+1])
		}
		return step.Batch{X: x, Y: y, W: w, RowW: rowW, RowInputs: rowInputs, N: N, B: B, T: T}
	}
	total := opts.Warmup + opts.Steps
	all, host, device := make([]float64, 0, opts.Steps), make([]float64, 0, opts.Steps), make([]float64, 0, opts.Steps)
	var timed time.Duration
	for i := 0; i < total; i++ {
		if i == opts.Warmup {
			mlx.ResetPeakMemory()
		}
		start := time.Now()
		if err := st.Apply(sched.LR(i), fill(i)); err != nil {
			return fmt.Errorf("bench step %d: %w", i+1, err)
		}
		called := time.Now()
		if i == countedUpdate(total) {
			byOp, err := st.GraphOps()
			if err != nil {
				return err
			}
			res.GraphOps, res.GraphOpsByPrimitive = mlx.CountKernelOps(byOp), byOp
			counting := time.Since(called)
			start, called = start.Add(counting), called.Add(counting)
		}
		if err := st.Eval(); err != nil {
			return fmt.Errorf("bench step %d: %w", i+1, err)
		}
		done := time.Now()
		stats, err := st.Stats()
		if err != nil {
			return err
		}
		if err := finiteLoss(stats.Loss); err != nil {
			return fmt.Errorf("bench step %d: %w", i+1, err)
		}
		if i == 0 {
			res.LossFirst = stats.Loss
		}
		res.LossLast = stats.Loss
		if i >= opts.Warmup {
			timed += done.Sub(start)
			all = append(all, ms(done.Sub(start)))
			host = append(host, ms(called.Sub(start)))
			device = append(device, ms(done.Sub(called)))
		}
	}
	mem := mlx.Memory()
	res.PeakMemoryBytes, res.ActiveMemoryBytes = mem.Peak, mem.Active
	res.Traces = update.Traces()
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
	return pipelined(st, opts, cfg.LogEvery, func(i int) float64 { return sched.LR(opts.Warmup + i) },
		func(i int) (step.Batch, error) { return fill(total + i), nil }, res)
}
