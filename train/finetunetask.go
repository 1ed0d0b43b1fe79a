package train

import (
	"fmt"
	"path/filepath"
	"slices"

	"github.com/posttrainllm/posttrainllm/checkpoint"
	"github.com/posttrainllm/posttrainllm/mlx"
	"github.com/posttrainllm/posttrainllm/model"
	"github.com/posttrainllm/posttrainllm/optim"
	"github.com/posttrainllm/posttrainllm/peft"
)

// fineTuneTask is the task of a FineTuner: a weighted step (packed with
// FineTuneConfig.Pack) over the base's weights, frozen under adapters or
// trained in full; a batch feed of the records' rows; the held-out loss
// over the counted targets of the validation rows; and checkpoints of the
// trainable arrays with finetune.json. What the step minimises comes from
// the objective (sftObjective) and what it is fed from the feed (rowFeed):
// another objective brings its own pair, not a loop.
type fineTuneTask struct {
	f   *FineTuner
	cfg Config
	ftBuilt
	feed     batchFeed
	eval     *evalFunc      // rank 0 only
	pairEval *PairEvaluator // a preference objective's, rank 0 only
	refs     References     // a full DPO or IPO fine-tune's reference log-probabilities
}

// ftBuilt is a fine-tune's step over its state, with what they were
// built from.
type ftBuilt struct {
	adapter    *peft.Adapter // nil for a full fine-tune
	objective  fineTuneObjective
	opt        optim.Optimizer
	step       *Step
	state      *State
	trainNames []string // names of the trainable arrays
}

// free releases the state and the step.
func (b *ftBuilt) free() {
	b.state.Free()
	b.step.Free()
}

// batchFeed is where a fine-tune's updates come from: next returns the
// next update's batch (the weight total of the whole update across the
// data-parallel ranks in Batch.WeightSum), appendState the feed's state
// after it, which a resumed run restores.
type batchFeed interface {
	next() (Batch, error)
	appendState(b []byte) []byte
}

// fineTuneObjective is what a fine-tune's step minimises and its
// evaluation measures, over the trainable arrays and the frozen ones.
type fineTuneObjective struct {
	loss       WeightedLossFunc
	packedLoss PackedLossFunc
	evalTerms  TokenLossFunc
	// rowLoss, for a preference objective (preferenceObjective), replaces
	// the others: the loss of a row step (NewRowStep) taking rowInputs
	// row inputs after the row weights.
	rowLoss   RowLossFunc
	rowInputs int
}

// sftObjective is supervised fine-tuning's: the cross-entropy of the
// counted targets, through the adapters a (nil for a full fine-tune,
// whose trainable arrays are the model's parameters).
func sftObjective(m *model.TinyGPT, a *peft.Adapter) fineTuneObjective {
	if a == nil {
		return fineTuneObjective{loss: FullLoss(m), packedLoss: PackedFullLoss(m), evalTerms: m.LossTerms}
	}
	nA := len(a.Specs)
	return fineTuneObjective{loss: AdapterLoss(m, a), packedLoss: PackedAdapterLoss(m, a),
		evalTerms: func(all []*mlx.Array, x, y *mlx.Array) (*mlx.Array, *mlx.Array) {
			return AdapterTerms(m, a, all[:nA], all[nA:], x, y)
		}}
}

// open loads the base and, when resuming, the checkpoint; builds the
// optimizer, step and state, the row feed and the evaluation.
func (k *fineTuneTask) open(env taskEnv) (taskParts, error) {
	f, cfg := k.f, env.cfg
	k.cfg = cfg
	var parts taskParts
	if env.lead() {
		if err := copyTokenizerDir(checkpoint.RunDirOf(f.FineTune.Base), env.runDir); err != nil {
			return parts, err
		}
	}
	if err := mlx.UseDevice(cfg.Device); err != nil {
		return parts, err
	}
	schedule, err := NewSchedule(cfg)
	if err != nil {
		return parts, err
	}
	// The plan first: a probe wants nothing else of the run allocated.
	plan, err := choosePlan(cfg, k.probe())
	if err != nil {
		return parts, err
	}
	resumed, err := k.openState(env, plan)
	if err != nil {
		return parts, err
	}
	if env.lead() && k.objective.rowLoss != nil {
		if k.pairEval, err = NewPairEvaluator(k.objective.rowLoss, len(k.state.Params()), len(k.state.Frozen()), cfg.Compile); err != nil {
			return parts, err
		}
	} else if env.lead() {
		if k.eval, err = newEvalFunc(k.objective.evalTerms, cfg.Compile); err != nil {
			return parts, err
		}
	}
	var samplerState []byte
	if resumed != nil {
		samplerState = resumed.SamplerState
	}
	rows, err := newRowFeed(f.Train, cfg, plan, env.group, samplerState)
	if err != nil {
		return parts, err
	}
	k.feed = rows
	if f.FineTune.Prefers() {
		if plan.MicroBatch%2 != 0 {
			return parts, fmt.Errorf("micro-batch %d for objective %s, want an even number of rows (each pair's answers side by side)", plan.MicroBatch, f.FineTune.Objective)
		}
		k.feed = &pairFeed{rows: rows, refs: k.refs.Train, ranks: env.group.Size()}
	}
	specs := f.Model.Specs
	params := cfg.Model.NumParams()
	if k.adapter != nil {
		specs, params = k.adapter.Specs, k.adapter.NumParams()
	}
	return taskParts{step: k.step, state: k.state, schedule: schedule, plan: plan,
		specs: specs, stateNames: k.opt.StateNames(), resumed: resumed,
		tokensPerStep: f.TokensPerStep(), start: Start{Params: params},
		settings: []Setting{{"config", cfg}, {"finetune", f.FineTune}}}, nil
}

// openState loads the base checkpoint and builds the fine-tune's step and
// state over it (build), fresh or resumed, returning the resumed
// checkpoint's run state.
func (k *fineTuneTask) openState(env taskEnv, plan Plan) (*RunState, error) {
	f, cfg := k.f, env.cfg
	ck, err := loadCheckpoint(f.FineTune.Base)
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
	if f.FineTune.Prefers() && !f.FineTune.UsesAdapter() && f.FineTune.Preference().NeedsReference() {
		// The reference is the base model: its log-probabilities are
		// computed (or read) before the base weights start to change.
		if k.refs, err = k.fineTuneReferences(env, base); err != nil {
			mlx.Free(base...)
			return nil, fmt.Errorf("reference: %w", err)
		}
	}
	ck.Params = nil // build owns base now
	var resumed *RunState
	k.ftBuilt, resumed, err = k.build(cfg, plan, env.group, base, quant, env.resumeFrom)
	return resumed, err
}

// build makes the adapters (unless the fine-tune is full), the optimizer,
// the step of plan on group g and its state over the base weights base,
// which it takes: fresh, or the trainable arrays and optimizer state of
// the checkpoint resumeFrom, whose run state it returns. quant is the
// layout of a base checkpoint stored quantized (base is then its frozen
// list), nil for a float one.
func (k *fineTuneTask) build(cfg Config, plan Plan, g *mlx.Group, base []*mlx.Array, quant *peft.Quantized, resumeFrom string) (b ftBuilt, resumed *RunState, err error) {
	f := k.f
	owned := base
	defer func() { mlx.Free(owned...) }() // until the state takes them
	opts := plan.StepOptions(cfg)
	opts.Group = g
	var trainable, frozen []*mlx.Array
	if f.FineTune.UsesAdapter() {
		if b.adapter, err = NewAdapter(cfg, f.FineTune.Adapter(), f.Model.Specs); err != nil {
			return b, nil, err
		}
		b.trainNames = b.adapter.Names()
		if b.opt, err = NewOptimizerFor(cfg, AdapterOptimizerParams(b.adapter)); err != nil {
			return b, nil, err
		}
		frozen = base
		b.adapter.Quant = quant
		if quant == nil {
			if err := CastFrozenBase(cfg, base); err != nil {
				return b, nil, err
			}
		}
		if f.FineTune.Quantize > 0 {
			if frozen, err = quantizeBase(b.adapter, f.Model, base, f.FineTune); err != nil {
				return b, nil, err
			}
			owned = frozen // the float weights of the quantized slots are freed
		}
		opts = AdapterStepOptions(opts, cfg.Model)
	} else {
		b.trainNames = make([]string, len(f.Model.Specs))
		for i, s := range f.Model.Specs {
			b.trainNames[i] = s.Name
		}
		if b.opt, err = NewOptimizer(cfg, f.Model.Specs); err != nil {
			return b, nil, err
		}
		trainable = base
	}
	var optState []*mlx.Array
	if resumeFrom != "" {
		trainable, optState, resumed, err = k.loadResumed(b, resumeFrom)
	} else {
		trainable, optState, err = b.fresh(cfg.Seed, trainable, frozen)
	}
	if err != nil {
		return b, nil, err
	}
	ownTrainable := f.FineTune.UsesAdapter() || resumeFrom != "" // not the base arrays
	if !f.FineTune.UsesAdapter() && resumeFrom != "" {
		mlx.Free(base...) // the resumed model replaces the base
		owned = nil
	}
	b.objective = sftObjective(f.Model, b.adapter)
	if f.FineTune.Prefers() {
		b.objective = preferenceObjective(f.Model, b.adapter, f.FineTune.Preference())
	}
	if b.objective.rowLoss != nil {
		b.step, err = NewRowStep(b.objective.rowLoss, b.opt, len(trainable), len(frozen), len(optState), b.objective.rowInputs, len(PreferenceAux), opts)
	} else if f.FineTune.Pack {
		b.step, err = NewPackedStep(b.objective.packedLoss, b.opt, len(trainable), len(frozen), len(optState), opts)
	} else {
		b.step, err = NewWeightedStep(b.objective.loss, b.opt, len(trainable), len(frozen), len(optState), opts)
	}
	if err == nil {
		b.state, err = NewFrozenState(b.step, trainable, frozen, optState)
	}
	if err != nil {
		b.step.Free()
		b.step = nil
		mlx.Free(optState...)
		if ownTrainable {
			mlx.Free(trainable...)
		}
		return b, nil, err
	}
	owned = nil
	return b, resumed, nil
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

// loadResumed reads the trainable arrays, optimizer state and run state
// of the checkpoint dir for b, checking that it is a fine-tune of this
// kind.
func (k *fineTuneTask) loadResumed(b ftBuilt, dir string) ([]*mlx.Array, []*mlx.Array, *RunState, error) {
	st, err := ReadRunState(filepath.Join(dir, checkpoint.StateFile))
	if err != nil {
		return nil, nil, nil, fmt.Errorf("resume: checkpoint %s: %w", dir, err)
	}
	saved, err := ReadFineTuneConfig(dir)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("resume: %w", err)
	}
	if ft := k.f.FineTune; saved.Prefers() != ft.Prefers() || ft.Prefers() && saved.Preference() != ft.Preference() {
		return nil, nil, nil, fmt.Errorf("resume: checkpoint %s optimises %+v, this run %+v; resume with the same objective", dir, saved.Preference(), ft.Preference())
	}
	if ft := k.f.FineTune; saved.Method != ft.Method || saved.Rank != ft.Rank || saved.Alpha != ft.Alpha ||
		!slices.Equal(saved.Targets, ft.Targets) || saved.Quantize != ft.Quantize || saved.QuantGroupSize() != ft.QuantGroupSize() {
		return nil, nil, nil, fmt.Errorf("resume: checkpoint %s is a %s fine-tune (rank %d, alpha %g, targets %v), this run is %s (rank %d, alpha %g, targets %v)",
			dir, saved.Method, saved.Rank, saved.Alpha, saved.Targets, ft.Method, ft.Rank, ft.Alpha, ft.Targets)
	}
	if st.Config.Model != k.cfg.Model {
		return nil, nil, nil, fmt.Errorf("resume: checkpoint %s is of another model shape", dir)
	}
	file := filepath.Join(dir, checkpoint.ModelFile)
	specs := k.f.Model.Specs
	if b.adapter != nil {
		file, specs = filepath.Join(dir, checkpoint.AdapterFile), b.adapter.Specs
	}
	trainable, err := checkpoint.LoadNamed(file, b.trainNames, specShapes(specs))
	if err != nil {
		return nil, nil, nil, err
	}
	fresh, err := b.opt.Init()
	if err != nil {
		mlx.Free(trainable...)
		return nil, nil, nil, err
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
		return nil, nil, nil, fmt.Errorf("resume: %w", err)
	}
	optState, err := checkpoint.Ordered(optFile, arrays, b.opt.StateNames(), shapes)
	if err != nil {
		mlx.Free(trainable...)
		for _, a := range arrays {
			a.Free()
		}
		return nil, nil, nil, fmt.Errorf("resume: %w (optimizer %s)", err, k.cfg.Optimizer)
	}
	return trainable, optState, &st, nil
}

// next is the feed's next batch.
func (k *fineTuneTask) next(int) (Batch, error) { return k.feed.next() }

// release appends the feed's state after the batch; the feed reuses its
// buffers.
func (k *fineTuneTask) release(b []byte) []byte { return k.feed.appendState(b) }

// evaluates says whether there are held-out records.
func (k *fineTuneTask) evaluates() bool { return k.f.Valid != nil }

// evaluate measures the held-out loss over the counted targets of the
// validation rows.
func (k *fineTuneTask) evaluate(m *Metrics) (float64, error) {
	if k.pairEval != nil {
		return k.evaluatePairs(m)
	}
	params := append(append([]*mlx.Array{}, k.state.Params()...), k.state.Frozen()...)
	v, err := evaluateRows(k.eval, params, k.f.Valid, k.cfg.Batch, k.cfg.EvalTokens)
	if err != nil {
		return 0, err
	}
	m.ValLoss, m.ValTokens = &v.Loss, v.Tokens
	return v.Loss, nil
}

// save writes the trainable arrays (adapters alone, or the whole model),
// the optimizer state, the run state and finetune.json.
func (k *fineTuneTask) save(root string, rs RunState) (string, error) {
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
	return saveCheckpoint(root, rs, names, params, k.opt.StateNames(), st.OptState(), extra...)
}

// close releases what open built.
func (k *fineTuneTask) close() {
	if k.eval != nil {
		k.eval.free()
	}
	k.pairEval.Free()
	k.ftBuilt.free()
}
