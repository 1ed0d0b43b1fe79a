package train

import (
	"fmt"
	"path/filepath"

	"github.com/posttrainllm/posttrainllm/checkpoint"
	"github.com/posttrainllm/posttrainllm/data"
	"github.com/posttrainllm/posttrainllm/mlx"
	"github.com/posttrainllm/posttrainllm/model"
	"github.com/posttrainllm/posttrainllm/optim"
	"github.com/posttrainllm/posttrainllm/step"
)

// Prepare fills cfg's defaults (the vocabulary size from its tokenizer when
// unset), validates it, checks it against this machine's memory and builds
// its model: the checks every run passes before it allocates anything. The
// returned config carries the model's filled-in settings.
func Prepare(cfg Config) (Config, *model.Transformer, error) {
	cfg = cfg.WithDefaults()
	if cfg.Model.VocabSize == 0 {
		v, err := data.TokenizerVocabSize(cfg.Tokenizer)
		if err != nil {
			return cfg, nil, err
		}
		cfg.Model.VocabSize = v
	}
	if err := cfg.Validate(); err != nil {
		return cfg, nil, err
	}
	if err := cfg.CheckMemory(); err != nil {
		return cfg, nil, err
	}
	m, err := model.New(cfg.Model)
	if err != nil {
		return cfg, nil, err
	}
	m.Memory = cfg.ModelMemory()
	cfg.Model = m.Config
	return cfg, m, nil
}

// Setup is what a training run starts from: its model, optimizer,
// learning-rate schedule, plan, compiled step and state, fresh or loaded
// from a checkpoint. pretrain.Trainer and the benchmark harness both
// start with NewSetup.
type Setup struct {
	Config    Config
	Model     *model.Transformer
	Optimizer optim.Optimizer
	Schedule  optim.Schedule
	// Plan is how the step runs an update's Batch × Accum sequences; its
	// batches are [Plan.Steps, Plan.MicroBatch, context] (Plan.NewBatch).
	Plan  Plan
	Step  *step.Step
	State *step.State
	// Resumed is the run state of the checkpoint the state was loaded
	// from, nil for a fresh run.
	Resumed *RunState
}

// NewSetup builds the run of cfg (as Prepare returns it) on model m: it
// selects cfg's device, chooses the plan (ChoosePlan: on a GPU with an
// automatic micro-batch, a probe that runs a step per candidate), builds
// the optimizer, schedule and step, and initialises the state from
// cfg.Seed, or loads it from the checkpoint directory resumeFrom ("" for
// a fresh run), checking that the checkpoint belongs to this model and
// optimizer. The plan is no part of a checkpoint: any plan resumes it.
func NewSetup(cfg Config, m *model.Transformer, resumeFrom string) (*Setup, error) {
	return NewGroupSetup(cfg, m, resumeFrom, nil)
}

// NewGroupSetup is NewSetup for one rank of the data-parallel group g: its
// step averages the gradients across g (step.StepOptions.Group). Every rank
// starts from the same parameters (cfg.Seed or the checkpoint), so the
// ranks stay in step. The plan probe runs without the group: each rank
// plans its own micro-batch, which changes how its share runs, not what
// the update computes. A nil group is NewSetup.
func NewGroupSetup(cfg Config, m *model.Transformer, resumeFrom string, g *mlx.Group) (*Setup, error) {
	s := &Setup{Config: cfg, Model: m}
	err := mlx.Do(func() error {
		if err := mlx.UseDevice(cfg.Device); err != nil {
			return err
		}
		var err error
		if s.Plan, err = ChoosePlan(cfg, m); err != nil {
			return err
		}
		if s.Optimizer, err = NewOptimizer(cfg, m.Specs); err != nil {
			return err
		}
		if s.Schedule, err = NewSchedule(cfg); err != nil {
			return err
		}
		opts := s.Plan.StepOptions(cfg)
		opts.Group = g
		s.Step, err = step.NewModelStep(m, s.Optimizer, opts)
		if err != nil {
			return err
		}
		if resumeFrom == "" {
			s.State, err = step.InitState(s.Step, m, cfg.Seed)
			return err
		}
		s.State, s.Resumed, err = s.resume(resumeFrom)
		if err != nil {
			return fmt.Errorf("resume: %w", err)
		}
		return nil
	})
	if err != nil {
		s.Free()
		return nil, err
	}
	return s, nil
}

// resume loads the state of checkpoint dir into the setup's step.
func (s *Setup) resume(dir string) (*step.State, *RunState, error) {
	ck, err := loadCheckpoint(dir)
	if err != nil {
		return nil, nil, err
	}
	defer ck.Free() // what the state has not taken
	if ck.State.Config.Model != s.Config.Model {
		return nil, nil, fmt.Errorf("checkpoint %s is of another model shape (%+v), this run needs %+v",
			dir, ck.State.Config.Model, s.Config.Model)
	}
	params, err := OrderParams(filepath.Join(dir, checkpoint.ModelFile), ck.Params, s.Model)
	if err != nil {
		return nil, nil, err
	}
	var opt []*mlx.Array
	if ck.OptState == nil { // a step-0 checkpoint without optimizer state
		if opt, err = s.Optimizer.Init(); err != nil {
			return nil, nil, err
		}
	} else if opt, err = s.orderOptState(filepath.Join(dir, checkpoint.OptimizerFile), ck.OptState); err != nil {
		return nil, nil, err
	}
	st, err := step.NewState(s.Step, params, opt)
	if err != nil {
		return nil, nil, err
	}
	ck.Params, ck.OptState = nil, nil // the state owns them now
	return st, &ck.State, nil
}

// orderOptState picks the optimizer's state arrays by name from the arrays
// of file, checking them against the shapes and dtypes of a fresh state.
func (s *Setup) orderOptState(file string, named map[string]*mlx.Array) ([]*mlx.Array, error) {
	// A fresh state's arrays are lazy zeros: their shapes and dtypes are
	// what the checkpoint must hold, and nothing is allocated.
	fresh, err := s.Optimizer.Init()
	if err != nil {
		return nil, err
	}
	defer mlx.Free(fresh...)
	shapes := make([][]int, len(fresh))
	for i, a := range fresh {
		shapes[i] = a.Shape()
	}
	names := s.Optimizer.StateNames()
	state, err := checkpoint.Ordered(file, named, names, shapes)
	if err != nil {
		return nil, fmt.Errorf("%w (optimizer %s)", err, s.Config.Optimizer)
	}
	for i, a := range state {
		if a.Dtype() != fresh[i].Dtype() {
			return nil, fmt.Errorf("%s: %q is %v, the %s optimizer keeps it in %v",
				file, names[i], a.Dtype(), s.Config.Optimizer, fresh[i].Dtype())
		}
	}
	return state, nil
}

// Free releases the state and the step. A nil setup is a no-op.
func (s *Setup) Free() {
	if s != nil {
		s.State.Free()
		s.Step.Free()
	}
}
