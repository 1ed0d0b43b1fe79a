package finetune

import (
	"fmt"
	"path/filepath"

	"github.com/posttrainllm/posttrainllm/checkpoint"
	"github.com/posttrainllm/posttrainllm/mlx"
	"github.com/posttrainllm/posttrainllm/optim"
	"github.com/posttrainllm/posttrainllm/peft"
	"github.com/posttrainllm/posttrainllm/step"
	"github.com/posttrainllm/posttrainllm/train"
)

// fineTuneTask is the task of a FineTuner: the step of its Objective
// over the base's weights, frozen under adapters or trained in full; the
// objective's run (ObjectiveRun) for the batches and the held-out
// evaluation; and checkpoints of the trainable arrays with finetune.json.
// Another objective brings its own rows, loss, feed and evaluation, not
// a loop.
type fineTuneTask struct {
	f   *FineTuner
	cfg train.Config
	ftBuilt
	run ObjectiveRun
}

// ftBuilt is a fine-tune's step over its state, with what they were
// built from.
type ftBuilt struct {
	adapter    *peft.Adapter // nil for a full fine-tune
	opt        optim.Optimizer
	step       *step.Step
	state      *step.State
	trainNames []string // names of the trainable arrays
}

// free releases the state and the step.
func (b *ftBuilt) free() {
	b.state.Free()
	b.step.Free()
}

// policy is the model the fine-tune trains, through its adapters.
func (k *fineTuneTask) policy() Policy { return Policy{Model: k.f.Model, Adapter: k.adapter} }

// Open loads the base and, when resuming, the checkpoint; starts the
// objective's run; and builds the optimizer, step and state.
func (k *fineTuneTask) Open(env train.TaskEnv) (train.TaskParts, error) {
	f, cfg := k.f, env.Config
	k.cfg = cfg
	var parts train.TaskParts
	if env.Lead() {
		if err := train.CopyTokenizerDir(checkpoint.RunDirOf(f.FineTune.Base), env.RunDir); err != nil {
			return parts, err
		}
	}
	if err := mlx.UseDevice(cfg.Device); err != nil {
		return parts, err
	}
	schedule, err := train.NewSchedule(cfg)
	if err != nil {
		return parts, err
	}
	// The plan first: a probe wants nothing else of the run allocated.
	plan, err := train.ChooseStepPlan(cfg, k.probe())
	if err != nil {
		return parts, err
	}
	resumed, err := k.openState(env, plan)
	if err != nil {
		return parts, err
	}
	specs := f.Model.Specs
	params := cfg.Model.NumParams()
	if k.adapter != nil {
		specs, params = k.adapter.Specs, k.adapter.NumParams()
	}
	return train.TaskParts{Step: k.step, State: k.state, Schedule: schedule, Plan: plan,
		Specs: specs, StateNames: k.opt.StateNames(), Resumed: resumed,
		TokensPerStep: f.TokensPerStep(), Start: train.Start{Params: params},
		Settings: []train.Setting{{Tag: "config", Value: cfg}, {Tag: "finetune", Value: f.FineTune}}}, nil
}

// openState loads the base checkpoint, starts the objective's run over
// it (which may read the base weights before they change) and builds the
// fine-tune's step and state over it (build), fresh or resumed, returning
// the resumed checkpoint's run state.
func (k *fineTuneTask) openState(env train.TaskEnv, plan train.Plan) (*train.RunState, error) {
	f, cfg := k.f, env.Config
	var resumed *train.RunState
	if env.ResumeFrom != "" {
		st, err := train.ReadRunState(filepath.Join(env.ResumeFrom, checkpoint.StateFile))
		if err != nil {
			return nil, fmt.Errorf("resume: checkpoint %s: %w", env.ResumeFrom, err)
		}
		resumed = &st
	}
	ck, err := train.LoadCheckpoint(f.FineTune.Base)
	if err != nil {
		return nil, fmt.Errorf("base: %w", err)
	}
	defer ck.Free() // what the state has not taken
	if ck.State.Config.Model != cfg.Model {
		return nil, fmt.Errorf("base checkpoint %s is of another model shape (%+v), the fine-tune needs %+v", f.FineTune.Base, ck.State.Config.Model, cfg.Model)
	}
	base, quant, err := orderBase(filepath.Join(f.FineTune.Base, checkpoint.ModelFile), ck.Params, f.Model, f.FineTune)
	if err != nil {
		return nil, err
	}
	ck.Params = nil // build owns base now
	if k.adapter, err = k.newAdapter(cfg); err != nil {
		mlx.Free(base...)
		return nil, err
	}
	if k.adapter != nil {
		k.adapter.Quant = quant
	}
	oenv := ObjectiveEnv{Policy: k.policy(), Base: base, BaseDir: f.FineTune.Base, RunDir: env.RunDir,
		Train: f.Train, Valid: f.Valid, Config: cfg, Plan: plan, Group: env.Group,
		Current: func() ([]*mlx.Array, []*mlx.Array) { return k.state.Params(), k.state.Frozen() }, Context: env.Context}
	if resumed != nil {
		oenv.SamplerState = resumed.SamplerState
	}
	if k.run, err = f.Objective.Start(oenv); err != nil {
		mlx.Free(base...)
		return nil, err
	}
	k.ftBuilt, err = k.build(cfg, plan, env.Group, k.adapter, base, resumed, env.ResumeFrom)
	return resumed, err
}

// newAdapter returns the fine-tune's adapters, fresh (no arrays yet), or
// nil for a full fine-tune.
func (k *fineTuneTask) newAdapter(cfg train.Config) (*peft.Adapter, error) {
	if !k.f.FineTune.UsesAdapter() {
		return nil, nil
	}
	return NewAdapter(cfg, k.f.FineTune.Adapter(), k.f.Model.Specs)
}

// build makes the optimizer, the step of plan on group g and its state
// over the base weights base, which it takes, through adapter a (nil for
// a full fine-tune): fresh, or the trainable arrays and
// optimizer state of the checkpoint resumeFrom, whose run state is
// resumed. A base checkpoint stored quantized is the adapter's Quant
// layout (base is then its frozen list).
func (k *fineTuneTask) build(cfg train.Config, plan train.Plan, g *mlx.Group, a *peft.Adapter, base []*mlx.Array, resumed *train.RunState, resumeFrom string) (b ftBuilt, err error) {
	f := k.f
	b.adapter = a
	owned := base
	defer func() { mlx.Free(owned...) }() // until the state takes them
	opts := plan.StepOptions(cfg)
	opts.Group = g
	var trainable, frozen []*mlx.Array
	if b.adapter != nil {
		b.trainNames = b.adapter.Names()
		if b.opt, err = train.NewOptimizerFor(cfg, AdapterOptimizerParams(b.adapter)); err != nil {
			return b, err
		}
		frozen = base
		if b.adapter.Quant == nil {
			if err := CastFrozenBase(cfg, base); err != nil {
				return b, err
			}
		}
		if f.FineTune.Quantize > 0 {
			if frozen, err = QuantizeBase(b.adapter, f.Model, base, f.FineTune); err != nil {
				return b, err
			}
			owned = frozen // the float weights of the quantized slots are freed
		}
		opts = AdapterStepOptions(opts, cfg.Model)
	} else {
		b.trainNames = make([]string, len(f.Model.Specs))
		for i, s := range f.Model.Specs {
			b.trainNames[i] = s.Name
		}
		if b.opt, err = train.NewOptimizer(cfg, f.Model.Specs); err != nil {
			return b, err
		}
		trainable = base
	}
	var optState []*mlx.Array
	if resumeFrom != "" {
		trainable, optState, err = k.loadResumed(b, *resumed, resumeFrom)
	} else {
		trainable, optState, err = b.fresh(cfg.Seed, trainable, frozen)
	}
	if err != nil {
		return b, err
	}
	ownTrainable := f.FineTune.UsesAdapter() || resumeFrom != "" // not the base arrays
	if !f.FineTune.UsesAdapter() && resumeFrom != "" {
		mlx.Free(base...) // the resumed model replaces the base
		owned = nil
	}
	p := Policy{Model: f.Model, Adapter: b.adapter}
	layout := f.Objective.Layout(p)
	layout.Trainable, layout.Frozen, layout.State = len(trainable), len(frozen), len(optState)
	b.step, err = step.NewStep(f.Objective.Loss(p), b.opt, layout, opts)
	if err == nil {
		b.state, err = step.NewFrozenState(b.step, trainable, frozen, optState)
	}
	if err != nil {
		b.step.Free()
		b.step = nil
		mlx.Free(optState...)
		if ownTrainable {
			mlx.Free(trainable...)
		}
		return b, err
	}
	owned = nil
	return b, nil
}

// fresh returns a new run's trainable arrays (fresh adapters over the
// frozen base, or the base itself for a full fine-tune) and optimizer
// state.
func (b ftBuilt) fresh(seed uint64, trainable, frozen []*mlx.Array) ([]*mlx.Array, []*mlx.Array, error) {
	if b.adapter != nil {
		var err error
		if trainable, err = b.adapter.Init(seed, frozen); err != nil {
			return nil, nil, err
		}
	}
	optState, err := b.opt.Init()
	if err != nil {
		if b.adapter != nil {
			mlx.Free(trainable...)
		}
		return nil, nil, fmt.Errorf("optimizer state: %w", err)
	}
	return trainable, optState, nil
}

// loadResumed reads the trainable arrays and optimizer state of the
// checkpoint dir, of run state st, for b, checking that it is a fine-tune
// of this kind.
func (k *fineTuneTask) loadResumed(b ftBuilt, st train.RunState, dir string) ([]*mlx.Array, []*mlx.Array, error) {
	saved, err := ReadConfig(dir)
	if err != nil {
		return nil, nil, fmt.Errorf("resume: %w", err)
	}
	if err := sameObjective(saved, k.f.Objective); err != nil {
		return nil, nil, fmt.Errorf("resume: checkpoint %s: %w", dir, err)
	}
	if key, has, want, err := saved.ResumeConflict(k.f.FineTune, adapterShapeKeys, k.cfg.Model.Context); err != nil || key != "" {
		if err != nil {
			return nil, nil, fmt.Errorf("resume: %w", err)
		}
		ft := k.f.FineTune
		return nil, nil, fmt.Errorf("resume: checkpoint %s is a %s fine-tune (rank %d, alpha %g, targets %v), this run is %s (rank %d, alpha %g, targets %v): %s %s, not %s",
			dir, saved.Method, saved.Rank, saved.Alpha, saved.Targets, ft.Method, ft.Rank, ft.Alpha, ft.Targets, key, has, want)
	}
	if st.Config.Model != k.cfg.Model {
		return nil, nil, fmt.Errorf("resume: checkpoint %s is of another model shape", dir)
	}
	file := filepath.Join(dir, checkpoint.ModelFile)
	specs := k.f.Model.Specs
	if b.adapter != nil {
		file, specs = filepath.Join(dir, checkpoint.AdapterFile), b.adapter.Specs
	}
	trainable, err := checkpoint.LoadNamed(file, b.trainNames, train.SpecShapes(specs))
	if err != nil {
		return nil, nil, err
	}
	fresh, err := b.opt.Init()
	if err != nil {
		mlx.Free(trainable...)
		return nil, nil, err
	}
	defer mlx.Free(fresh...)
	shapes := make([][]int, len(fresh))
	for i, a := range fresh {
		shapes[i] = a.Shape()
	}
	optFile := filepath.Join(dir, checkpoint.OptimizerFile)
	arrays, _, err := mlx.LoadSafetensors(optFile)
	if err != nil {
		mlx.Free(trainable...)
		return nil, nil, fmt.Errorf("resume: %w", err)
	}
	optState, err := checkpoint.Ordered(optFile, arrays, b.opt.StateNames(), shapes)
	if err != nil {
		mlx.Free(trainable...)
		for _, a := range arrays {
			a.Free()
		}
		return nil, nil, fmt.Errorf("resume: %w (optimizer %s)", err, k.cfg.Optimizer)
	}
	return trainable, optState, nil
}

// Next is the objective's next batch.
func (k *fineTuneTask) Next(int) (step.Batch, error) { return k.run.Next() }

// Release appends the feed's state after the batch; the feed reuses its
// buffers.
func (k *fineTuneTask) Release(b []byte) []byte { return k.run.AppendState(b) }

// TaskMetrics (train.MetricsTask) are the objective run's own metrics since the last
// log line (ObjectiveMetrics), nil when it measures none.
func (k *fineTuneTask) TaskMetrics() map[string]float64 {
	if om, ok := k.run.(ObjectiveMetrics); ok {
		return om.Metrics()
	}
	return nil
}

// Evaluates says whether there are held-out records.
func (k *fineTuneTask) Evaluates() bool { return k.f.Valid != nil }

// Evaluate runs the objective's held-out evaluation into m.
func (k *fineTuneTask) Evaluate(m *train.Metrics) (float64, error) {
	v, err := k.run.Evaluate(k.state.Params(), k.state.Frozen())
	if err != nil {
		return 0, err
	}
	m.ValLoss, m.ValTokens, m.ValRows, m.ValAux = &v.Loss, v.Tokens, v.Rows, v.Aux
	return v.Loss, nil
}

// Save writes the trainable arrays (adapters alone, or the whole model),
// the optimizer state, the run state and finetune.json.
func (k *fineTuneTask) Save(root string, rs train.RunState) (string, error) {
	st := k.state
	var names []string
	var params []*mlx.Array
	if k.adapter == nil {
		names, params = k.trainNames, st.Params()
	}
	extra, err := fineTuneFiles(k.f.FineTune, k.trainNames, st.Params())
	if err != nil {
		return "", err
	}
	return train.SaveCheckpoint(root, rs, names, params, k.opt.StateNames(), st.OptState(), extra...)
}

// Close releases what Open built.
func (k *fineTuneTask) Close() {
	if k.run != nil {
		k.run.Close()
	}
	k.ftBuilt.free()
}
