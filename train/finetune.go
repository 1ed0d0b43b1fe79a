package train

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/posttrainllm/posttrainllm/data"
	"github.com/posttrainllm/posttrainllm/data/chattemplate"
	"github.com/posttrainllm/posttrainllm/mlx"
	"github.com/posttrainllm/posttrainllm/model"
	"github.com/posttrainllm/posttrainllm/optim"
	"github.com/posttrainllm/posttrainllm/peft"
)

// FineTuner fine-tunes a checkpoint on jsonl records, writing metrics and
// checkpoints into a run folder like a Trainer. Its step is a weighted
// step (NewWeightedStep): with adapters the base weights are frozen inputs
// and the optimizer holds state for the adapters alone; the loss is the
// mean over the counted targets of each whole update.
type FineTuner struct {
	// Config is the run: steps, batch, accum, optimizer, schedule, logging
	// and checkpoints. Its Model and Tokenizer are the base checkpoint's.
	Config   Config
	FineTune FineTuneConfig
	Model    *model.TinyGPT
	// Train and Valid are the rendered records; Valid may be nil.
	Train, Valid *data.Rows
	RunDir       string
	Hooks        Hooks
}

// NewFineTuner reads the base checkpoint's model and tokenizer into cfg,
// renders the records of ft.Train (and ft.Valid) into rows of the model's
// context, and checks everything before anything is written. ft.Base may
// name a run folder: it becomes its newest checkpoint (ResolveCheckpoint).
func NewFineTuner(cfg Config, ft FineTuneConfig, runDir string) (*FineTuner, error) {
	if err := ft.Validate(); err != nil {
		return nil, err
	}
	base, err := ResolveCheckpoint(ft.Base)
	if err != nil {
		return nil, fmt.Errorf("base: %w", err)
	}
	ft.Base = base
	st, err := ReadRunState(filepath.Join(ft.Base, StateFile))
	if err != nil {
		return nil, fmt.Errorf("base checkpoint %s: %w", ft.Base, err)
	}
	cfg.Model, cfg.Tokenizer = st.Config.Model, st.Config.Tokenizer
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Optimizer == "galore" || cfg.Optimizer == "sophia" {
		return nil, fmt.Errorf("finetune: optimizer %q refreshes its projections or Hessian estimate beside the pretraining step only; use adamw, lion, adafactor, muon or sgd", cfg.Optimizer)
	}
	m, err := model.New(cfg.Model)
	if err != nil {
		return nil, err
	}
	m.Memory = cfg.ModelMemory()
	if ft.UsesAdapter() {
		if _, err := peft.New(ft.Adapter(), m.Specs); err != nil {
			return nil, err
		}
	}
	tok, err := openRunTokenizer(ft.Tokenizers, cfg, RunDirOf(ft.Base))
	if err != nil {
		return nil, fmt.Errorf("base checkpoint %s: %w", ft.Base, err)
	}
	rowLen := cfg.Model.Context
	if ft.Context > rowLen {
		return nil, fmt.Errorf("context = %d, want at most the base model's context, %d", ft.Context, rowLen)
	} else if ft.Context > 0 {
		rowLen = ft.Context
	}
	tmpl, err := RunTemplate(RunDirOf(ft.Base))
	if err != nil {
		return nil, fmt.Errorf("base checkpoint %s: %w", ft.Base, err)
	}
	f := &FineTuner{Config: cfg, FineTune: ft, Model: m, RunDir: runDir}
	if f.Train, err = LoadTemplateRows(ft.Train, tok, tmpl, rowLen, ft.MaskPrompt, ft.Pack); err != nil {
		return nil, err
	}
	if ft.Valid != "" {
		// Held-out rows hold one example each: with document masking a
		// packed example's terms are those it has alone.
		if f.Valid, err = LoadTemplateRows(ft.Valid, tok, tmpl, rowLen, ft.MaskPrompt, false); err != nil {
			return nil, err
		}
	}
	return f, nil
}

// TokensPerStep is the token positions one update covers: batch × accum
// rows of the fine-tune's row length (FineTuneConfig.Context).
func (f *FineTuner) TokensPerStep() int { return f.Config.Batch * f.Config.Accum * f.Train.T }

// LoadRows reads a jsonl file of records and renders them with the
// built-in chat template into rows of context targets (data.Render,
// data.BuildRows).
func LoadRows(path string, tok data.Tokenizer, context int, maskPrompt, pack bool) (*data.Rows, error) {
	return LoadTemplateRows(path, tok, nil, context, maskPrompt, pack)
}

// LoadTemplateRows is LoadRows with chat records rendered by the model's
// own template tmpl (nil for the built-in one): see renderRecord.
func LoadTemplateRows(path string, tok data.Tokenizer, tmpl *chattemplate.Template, context int, maskPrompt, pack bool) (*data.Rows, error) {
	recs, err := data.ReadRecords(path)
	if err != nil {
		return nil, err
	}
	exs := make([]data.Example, len(recs))
	for i, r := range recs {
		if exs[i], err = renderRecord(r, tok, tmpl, maskPrompt); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
	}
	rows, err := data.BuildRows(exs, context, tok.EOT(), pack)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return rows, nil
}

// ftRun is one FineTuner.Run in progress.
type ftRun struct {
	f          *FineTuner
	cfg        Config
	resumeFrom string
	adapter    *peft.Adapter // nil for a full fine-tune
	opt        optim.Optimizer
	schedule   optim.Schedule
	step       *Step
	state      *State
	trainNames []string // names of the trainable arrays
	sampler    *data.RowSampler
	batch      *data.WeightedBatch
	eval       *evalFunc
	sink       sinks
	sum        *Summary

	steps        int
	samplerState []byte
	tokensSeen   int64
	before       time.Duration
	start        time.Time
	lastLog      time.Time
	lastLogStep  int
}

// Run fine-tunes from the base checkpoint, or from the fine-tune
// checkpoint directory resumeFrom, until Config.Steps updates are done or
// ctx is cancelled (then it writes a checkpoint and returns
// ErrInterrupted). It runs on the MLX thread, and so do the Hooks.
func (f *FineTuner) Run(ctx context.Context, resumeFrom string) (Summary, error) {
	sum := Summary{InitialValLoss: math.NaN(), ValLoss: math.NaN(), FirstLoss: math.NaN(), Loss: math.NaN()}
	err := mlx.Do(func() error {
		r := &ftRun{f: f, cfg: f.Config, resumeFrom: resumeFrom, sum: &sum}
		defer r.close()
		if err := r.open(); err != nil {
			return err
		}
		return r.train(ctx)
	})
	return sum, err
}

// open loads the base and, when resuming, the checkpoint; builds the
// step, state, sampler, evaluation and metrics log; calls OnStart.
func (r *ftRun) open() error {
	f, cfg := r.f, r.cfg
	if err := os.MkdirAll(f.RunDir, 0o755); err != nil {
		return fmt.Errorf("run folder: %w", err)
	}
	if err := copyTokenizerDir(RunDirOf(f.FineTune.Base), f.RunDir); err != nil {
		return err
	}
	if err := mlx.UseDevice(cfg.Device); err != nil {
		return err
	}
	var err error
	if r.schedule, err = NewSchedule(cfg); err != nil {
		return err
	}
	ck, err := loadCheckpoint(f.FineTune.Base)
	if err != nil {
		return fmt.Errorf("base: %w", err)
	}
	defer ck.Free() // what the state has not taken
	if ck.State.Config.Model != cfg.Model {
		return fmt.Errorf("base checkpoint %s is of another model shape (%+v), the fine-tune needs %+v", f.FineTune.Base, ck.State.Config.Model, cfg.Model)
	}
	base, quant, err := orderBase(filepath.Join(f.FineTune.Base, ModelFile), ck.Params, f.Model, f.FineTune)
	if err != nil {
		return err
	}
	ck.Params = nil // the run owns base now
	owned := base
	defer func() { mlx.Free(owned...) }() // until the state takes them
	opts := RunStepOptions(cfg)
	var loss WeightedLossFunc
	var packedLoss PackedLossFunc
	var trainable, frozen []*mlx.Array
	var evalTerms TokenLossFunc
	if f.FineTune.UsesAdapter() {
		if r.adapter, err = peft.New(f.FineTune.Adapter(), f.Model.Specs); err != nil {
			return err
		}
		r.trainNames = r.adapter.Names()
		if r.opt, err = NewOptimizerFor(cfg, AdapterOptimizerParams(r.adapter)); err != nil {
			return err
		}
		loss, packedLoss, frozen = AdapterLoss(f.Model, r.adapter), PackedAdapterLoss(f.Model, r.adapter), base
		r.adapter.Quant = quant // a quantized base checkpoint's layout; nil for a float one
		if f.FineTune.Quantize > 0 {
			if frozen, err = quantizeBase(r.adapter, f.Model, base, f.FineTune); err != nil {
				return err
			}
			owned = frozen // the float weights of the quantized slots are freed
		}
		// The float32 adapters feed their products in float32
		// (peft.Adapter.Linears): no compute-dtype copies.
		opts.ComputeCopies, opts.ComputeDtype = false, 0
		nA := len(r.adapter.Specs)
		evalTerms = func(all []*mlx.Array, x, y *mlx.Array) (*mlx.Array, *mlx.Array) {
			return AdapterTerms(f.Model, r.adapter, all[:nA], all[nA:], x, y)
		}
	} else {
		r.trainNames = make([]string, len(f.Model.Specs))
		for i, s := range f.Model.Specs {
			r.trainNames[i] = s.Name
		}
		if r.opt, err = NewOptimizer(cfg, f.Model.Specs); err != nil {
			return err
		}
		loss, packedLoss, trainable, evalTerms = FullLoss(f.Model), PackedFullLoss(f.Model), base, f.Model.LossTerms
	}
	var optState []*mlx.Array
	if r.resumeFrom != "" {
		trainable, optState, err = r.loadResumed(base)
	} else {
		trainable, optState, err = r.fresh(trainable, frozen)
	}
	if err != nil {
		return err
	}
	ownTrainable := f.FineTune.UsesAdapter() || r.resumeFrom != "" // not the base arrays
	if !f.FineTune.UsesAdapter() && r.resumeFrom != "" {
		mlx.Free(base...) // the resumed model replaces the base
		owned = nil
	}
	if f.FineTune.Pack {
		r.step, err = NewPackedStep(packedLoss, r.opt, len(trainable), len(frozen), len(optState), opts)
	} else {
		r.step, err = NewWeightedStep(loss, r.opt, len(trainable), len(frozen), len(optState), opts)
	}
	if err == nil {
		r.state, err = NewFrozenState(r.step, trainable, frozen, optState)
	}
	if err != nil {
		mlx.Free(optState...)
		if ownTrainable {
			mlx.Free(trainable...)
		}
		return err
	}
	owned = nil
	if r.eval, err = newEvalFunc(evalTerms, cfg.Compile); err != nil {
		return err
	}
	if r.sampler, err = data.NewRowSampler(f.Train, cfg.Seed); err != nil {
		return err
	}
	if r.samplerState != nil {
		if err := r.sampler.SetState(r.samplerState); err != nil {
			return fmt.Errorf("resume: %w", err)
		}
	}
	if r.batch, err = data.NewWeightedBatch(cfg.Accum, cfg.Batch, f.Train.T); err != nil {
		return err
	}
	if r.sink, err = openSinks(f.RunDir, r.steps, r.resumeFrom != "",
		Setting{"config", cfg}, Setting{"finetune", f.FineTune}); err != nil {
		return err
	}
	r.sum.StartStep, r.sum.Step = r.steps, r.steps
	plan := Plan{MicroBatch: cfg.Batch, Steps: cfg.Accum, How: PlanForced}
	r.sum.Plan = plan
	if f.Hooks.OnStart != nil {
		f.Hooks.OnStart(Start{Step: r.steps, Steps: cfg.Steps, Params: r.trainableParams(),
			TokensPerStep: f.TokensPerStep(), Resumed: r.resumeFrom, Plan: plan})
	}
	return nil
}

// trainableParams counts the parameters the fine-tune updates.
func (r *ftRun) trainableParams() int {
	if r.adapter != nil {
		return r.adapter.NumParams()
	}
	return r.cfg.Model.NumParams()
}

// fresh returns a new run's trainable arrays (fresh adapters over the
// frozen base, or the base itself for a full fine-tune) and optimizer
// state.
func (r *ftRun) fresh(trainable, frozen []*mlx.Array) ([]*mlx.Array, []*mlx.Array, error) {
	if r.adapter != nil {
		var err error
		if trainable, err = r.adapter.Init(r.cfg.Seed, frozen); err != nil {
			return nil, nil, err
		}
	}
	optState, err := r.opt.Init()
	if err != nil {
		if r.adapter != nil {
			mlx.Free(trainable...)
		}
		return nil, nil, fmt.Errorf("optimizer state: %w", err)
	}
	return trainable, optState, nil
}

// loadResumed reads the trainable arrays, optimizer state and run state
// of the checkpoint being resumed.
func (r *ftRun) loadResumed(base []*mlx.Array) ([]*mlx.Array, []*mlx.Array, error) {
	dir := r.resumeFrom
	st, err := ReadRunState(filepath.Join(dir, StateFile))
	if err != nil {
		return nil, nil, fmt.Errorf("resume: checkpoint %s: %w", dir, err)
	}
	saved, err := ReadFineTuneConfig(dir)
	if err != nil {
		return nil, nil, fmt.Errorf("resume: %w", err)
	}
	if ft := r.f.FineTune; saved.Method != ft.Method || saved.Rank != ft.Rank || saved.Alpha != ft.Alpha ||
		!slices.Equal(saved.Targets, ft.Targets) || saved.Quantize != ft.Quantize || saved.QuantGroupSize() != ft.QuantGroupSize() {
		return nil, nil, fmt.Errorf("resume: checkpoint %s is a %s fine-tune (rank %d, alpha %g, targets %v), this run is %s (rank %d, alpha %g, targets %v)",
			dir, saved.Method, saved.Rank, saved.Alpha, saved.Targets, ft.Method, ft.Rank, ft.Alpha, ft.Targets)
	}
	if st.Config.Model != r.cfg.Model {
		return nil, nil, fmt.Errorf("resume: checkpoint %s is of another model shape", dir)
	}
	r.steps, r.samplerState, r.tokensSeen = st.Step, st.SamplerState, st.TokensSeen
	r.before = time.Duration(st.ElapsedSeconds * float64(time.Second))
	file := filepath.Join(dir, ModelFile)
	specs := r.f.Model.Specs
	if r.adapter != nil {
		file, specs = filepath.Join(dir, AdapterFile), r.adapter.Specs
	}
	trainable, err := loadNamed(file, r.trainNames, specs)
	if err != nil {
		return nil, nil, err
	}
	fresh, err := r.opt.Init()
	if err != nil {
		mlx.Free(trainable...)
		return nil, nil, err
	}
	defer mlx.Free(fresh...)
	shapes := make([][]int, len(fresh))
	for i, a := range fresh {
		shapes[i] = a.Shape()
	}
	optFile := filepath.Join(dir, OptimizerFile)
	arrays, _, err := mlx.LoadSafetensors(optFile)
	if err != nil {
		mlx.Free(trainable...)
		return nil, nil, fmt.Errorf("resume: %w", err)
	}
	optState, err := ordered(optFile, arrays, r.opt.StateNames(), shapes)
	if err != nil {
		mlx.Free(trainable...)
		for _, a := range arrays {
			a.Free()
		}
		return nil, nil, fmt.Errorf("resume: %w (optimizer %s)", err, r.cfg.Optimizer)
	}
	return trainable, optState, nil
}

// loadNamed loads the arrays of a safetensors file in the order of names,
// checking their shapes against specs.
func loadNamed(file string, names []string, specs []model.ParamSpec) ([]*mlx.Array, error) {
	arrays, _, err := mlx.LoadSafetensors(file)
	if err != nil {
		return nil, err
	}
	shapes := make([][]int, len(specs))
	for i, s := range specs {
		shapes[i] = s.Shape
	}
	out, err := ordered(file, arrays, names, shapes)
	if err != nil {
		for _, a := range arrays {
			a.Free()
		}
		return nil, err
	}
	return out, nil
}

// close releases what open set up.
func (r *ftRun) close() {
	r.sink.Close()
	if r.eval != nil {
		r.eval.free()
	}
	r.state.Free()
	r.step.Free()
}

// train runs the updates, logging, evaluating and checkpointing.
func (r *ftRun) train(ctx context.Context) error {
	mlx.ResetPeakMemory()
	if r.f.Valid != nil && r.cfg.EvalEvery > 0 && r.steps == 0 {
		v, err := r.evaluate()
		if err != nil {
			return err
		}
		r.sum.InitialValLoss, r.sum.ValLoss = v.Loss, v.Loss
		if err := r.sink.Log(Metrics{Step: 0, Loss: math.NaN(), LR: r.schedule.LR(0), ValLoss: &v.Loss, ValTokens: v.Tokens}); err != nil {
			return err
		}
	}
	r.start = time.Now()
	r.lastLog, r.lastLogStep = r.start, r.steps
	for r.steps < r.cfg.Steps {
		if ctx.Err() != nil {
			if err := r.checkpoint(); err != nil {
				return err
			}
			r.sum.Elapsed = time.Since(r.start)
			return fmt.Errorf("at step %d: %w", r.steps, ErrInterrupted)
		}
		if err := r.sampler.FillBatch(r.batch); err != nil {
			return err
		}
		lr := r.schedule.LR(r.steps)
		b := r.batch
		if err := r.state.UpdateAsync(lr, Batch{X: b.X, Y: b.Y, W: b.W, Seg: b.Seg, N: b.N, B: b.B, T: b.T}); err != nil {
			return err
		}
		r.samplerState = append(r.samplerState[:0], b.State...)
		r.steps++
		r.tokensSeen += int64(r.f.TokensPerStep())
		logNow, evalNow, ckptNow := r.cfg.due(r.steps)
		evalNow = evalNow && r.f.Valid != nil
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
		r.sum.Step = r.steps
	}
	r.sum.finish(r.steps, r.step.Traces(), r.start, r.f.TokensPerStep())
	return nil
}

// evaluate measures the held-out loss over every counted target of the
// validation rows.
func (r *ftRun) evaluate() (EvalResult, error) {
	params := append(append([]*mlx.Array{}, r.state.Params()...), r.state.Frozen()...)
	return evaluateRows(r.eval, params, r.f.Valid, r.cfg.Batch, r.cfg.EvalTokens)
}

// evaluateRows is the loss of params over the counted targets of the
// first rows of rows, as many as cover tokens positions (all of them when
// fewer), in batches of batch rows (the last padded with rows that count
// nothing). The same rows every time, so successive values compare.
func evaluateRows(fn *evalFunc, params []*mlx.Array, rows *data.Rows, batch, tokens int) (EvalResult, error) {
	T := rows.T
	n := min(rows.Len(), max(1, (tokens+T-1)/T))
	batches := (n + batch - 1) / batch
	sc := mlx.NewScope()
	defer sc.Close()
	return fn.run(params, batch, T, batches, func(i int, x, y []int32, w []float32) int {
		clear(x)
		clear(y)
		clear(w)
		lo := i * batch * T
		hi := min(lo+batch*T, n*T)
		copy(x, rows.X[lo:hi])
		copy(y, rows.Y[lo:hi])
		copy(w, rows.W[lo:hi])
		n := 0
		for _, v := range w {
			if v > 0 {
				n++
			}
		}
		return n
	})
}

// log reads the update's loss back, stops on a value that is not finite,
// evaluates when asked and writes the metrics line.
func (r *ftRun) log(lr float64, eval bool) error {
	st, err := r.state.Stats()
	if err != nil {
		return err
	}
	mean, counted, _, err := r.state.IntervalLoss()
	if err != nil {
		return err
	}
	if bad := logNonFinite(st, mean); bad != "" {
		r.sum.Elapsed = time.Since(r.start)
		return fmt.Errorf("step %d: %s (lr %.3g); stopping without a checkpoint: %w", r.steps, bad, lr, ErrNonFinite)
	}
	if math.IsNaN(r.sum.FirstLoss) {
		r.sum.FirstLoss = mean
	}
	r.sum.Loss = mean
	now := time.Now()
	m := Metrics{Step: r.steps, Loss: mean, LossLast: st.Loss, CountedTokens: counted, LR: lr, GradNorm: st.GradNorm,
		ElapsedS: (r.before + now.Sub(r.start)).Seconds(), MicroBatch: r.cfg.Batch, AccumSteps: r.cfg.Accum}
	if dt := now.Sub(r.lastLog).Seconds(); dt > 0 {
		m.StepsPerS = float64(r.steps-r.lastLogStep) / dt
		m.TokensPerS = m.StepsPerS * float64(r.f.TokensPerStep())
	}
	r.lastLog, r.lastLogStep = now, r.steps
	if eval {
		v, err := r.evaluate()
		if err != nil {
			return err
		}
		m.ValLoss, m.ValTokens = &v.Loss, v.Tokens
		r.sum.ValLoss = v.Loss
	}
	r.sum.TokensPerS = m.TokensPerS
	m.PeakMemoryBytes = mlx.Memory().Peak
	if err := r.sink.Log(m); err != nil {
		return err
	}
	if r.f.Hooks.OnLog != nil {
		r.f.Hooks.OnLog(m)
	}
	return nil
}

// checkpoint saves the trainable arrays (adapters alone, or the whole
// model), the optimizer state, the run state and finetune.json.
func (r *ftRun) checkpoint() error {
	st := r.state
	specs := r.f.Model.Specs
	if r.adapter != nil {
		specs = r.adapter.Specs
	}
	bad, err := nonFiniteArrays(specs, r.opt.StateNames(), st.Params(), st.OptState())
	if err != nil {
		return err
	}
	if bad != "" {
		return fmt.Errorf("step %d: %s is not finite; stopping without a checkpoint: %w", r.steps, bad, ErrNonFinite)
	}
	rs := RunState{Step: r.steps, Config: r.cfg, SamplerState: r.samplerState,
		TokensSeen: r.tokensSeen, ElapsedSeconds: (r.before + time.Since(r.start)).Seconds()}
	var names []string
	var params []*mlx.Array
	if r.adapter == nil {
		names, params = r.trainNames, st.Params()
	}
	extra, err := fineTuneFiles(r.f.FineTune, r.trainNames, st.Params())
	if err != nil {
		return err
	}
	root := CheckpointRoot(r.f.RunDir)
	dir, err := saveCheckpoint(root, rs, names, params, r.opt.StateNames(), st.OptState(), extra...)
	if err != nil {
		return err
	}
	if err := PruneCheckpoints(root, r.cfg.KeepCheckpoints); err != nil {
		return fmt.Errorf("checkpoint: pruning: %w", err)
	}
	r.sum.LastCheckpoint = dir
	if r.f.Hooks.OnCheckpoint != nil {
		r.f.Hooks.OnCheckpoint(dir, r.steps)
	}
	return nil
}
