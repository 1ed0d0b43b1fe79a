package pretrain

import (
	"fmt"

	"github.com/posttrainllm/posttrainllm/checkpoint"
	"github.com/posttrainllm/posttrainllm/data"
	"github.com/posttrainllm/posttrainllm/step"
	"github.com/posttrainllm/posttrainllm/train"
)

// pretrainTask is the task of a Trainer: windows of a token corpus fed to
// the model's step (from the host, or gathered on the device from a token
// stream), GaLore's and Sophia's refreshes beside it, the held-out loss on
// the corpus's validation windows, and whole checkpoints (model and
// optimizer state).
type pretrainTask struct {
	t        *Trainer
	cfg      train.Config
	setup    *train.Setup
	eval     *Evaluator // rank 0 only
	prefetch *data.Prefetcher
	batch    *data.Batch       // the batch next returned, until release
	stream   *step.TokenStream // the training view on the device, or nil (train.WindowSource)
	galore   *GaLoreRefresher  // nil unless the optimizer is galore
	sophia   *SophiaEstimator  // nil unless the optimizer is sophia
}

// Open builds the setup (fresh or resumed), the refreshers, the evaluator
// and the prefetched, sharded stream of windows.
func (p *pretrainTask) Open(env train.TaskEnv) (train.TaskParts, error) {
	t, cfg := p.t, env.Config
	p.cfg = cfg
	var parts train.TaskParts
	if env.Lead() && env.ResumeFrom != "" {
		if err := train.CopyTokenizerDir(checkpoint.RunDirOf(env.ResumeFrom), env.RunDir); err != nil {
			return parts, err
		}
	}
	var err error
	if p.setup, err = train.NewGroupSetup(cfg, t.Model, env.ResumeFrom, env.Group); err != nil {
		return parts, err
	}
	if g := env.Group; g.Size() > 1 && (cfg.Optimizer == "galore" || cfg.Optimizer == "sophia") {
		return parts, fmt.Errorf("train: optimizer %q on %d data-parallel ranks: its refresh reads one rank's batch and the ranks would diverge; use it in one process", cfg.Optimizer, g.Size())
	}
	if p.galore, err = NewGaLoreRefresher(p.setup.Optimizer, t.Model); err != nil {
		return parts, err
	}
	if p.sophia, err = NewSophiaEstimator(p.setup.Optimizer, t.Model, cfg.Seed, cfg.Compile); err != nil {
		return parts, err
	}
	if env.Lead() {
		p.eval, err = NewEvaluator(t.Model.LossTerms, t.Data.Val, cfg.Batch, cfg.Model.Context, cfg.EvalTokens, cfg.Seed+1, cfg.Compile)
		if err != nil {
			return parts, err
		}
	}
	if err := p.openWindows(env); err != nil {
		return parts, err
	}
	s := p.setup
	return train.TaskParts{Step: s.Step, State: s.State, Schedule: s.Schedule, Plan: s.Plan,
		Specs: t.Model.Specs, StateNames: s.Optimizer.StateNames(), Resumed: s.Resumed,
		TokensPerStep: cfg.TokensPerStep(),
		Start:         train.Start{Params: cfg.Model.NumParams(), Windows: DescribeWindows(cfg, t.Data.Train.Len())},
		Settings:      []train.Setting{{Tag: "config", Value: cfg}}}, nil
}

// openWindows starts the prefetcher of the training windows: this rank's
// shard of one seeded stream, from the resumed sampler state.
func (p *pretrainTask) openWindows(env train.TaskEnv) error {
	cfg, view := env.Config, p.t.Data.Train
	sampler, err := data.NewSampler(view, cfg.Model.Context, cfg.Seed)
	if err != nil {
		return err
	}
	if g := env.Group; g.Size() > 1 {
		if err := sampler.Shard(g.Rank(), g.Size(), cfg.Batch); err != nil {
			return err
		}
	}
	if err := SetBPEDropout(sampler, cfg); err != nil {
		return err
	}
	if rs := p.setup.Resumed; rs != nil && rs.SamplerState != nil {
		if err := sampler.SetState(rs.SamplerState); err != nil {
			return fmt.Errorf("resume: sampler state: %w", err)
		}
	}
	// Batches come in the plan's shape; the sampler draws the same windows
	// in the same order whatever the plan (train.Plan.NewBatch).
	plan := p.setup.Plan
	if device, _ := train.WindowSource(cfg, view.Len()); device {
		if p.stream, err = step.NewTokenStream(view, cfg.Model.Context); err != nil {
			return err
		}
		p.prefetch, err = data.NewStartsPrefetcher(sampler, plan.Steps, plan.MicroBatch, cfg.Model.Context, cfg.PrefetchDepth)
	} else {
		p.prefetch, err = data.NewPrefetcher(sampler, plan.Steps, plan.MicroBatch, cfg.Model.Context, cfg.PrefetchDepth)
	}
	return err
}

// Next takes the next prefetched batch, refreshing GaLore's projections
// and Sophia's Hessian estimate on it when due.
func (p *pretrainTask) Next(update int) (step.Batch, error) {
	batch, err := p.prefetch.Next()
	if err != nil {
		return step.Batch{}, err
	}
	p.batch = batch
	if p.galore.Due(update) {
		if err := p.galore.Refresh(p.setup.State, step.BatchOf(batch)); err != nil {
			return step.Batch{}, err
		}
	}
	if p.sophia.Due(update) {
		if err := p.sophia.Estimate(p.setup.State, step.BatchOf(batch), update); err != nil {
			return step.Batch{}, err
		}
	}
	if p.stream != nil {
		return p.stream.Batch(batch), nil
	}
	return step.BatchOf(batch), nil
}

// Release appends the sampler state after the batch and hands the batch
// back to the prefetcher.
func (p *pretrainTask) Release(b []byte) []byte {
	if p.batch == nil {
		return b
	}
	b = append(b, p.batch.State...)
	p.prefetch.Release(p.batch)
	p.batch = nil
	return b
}

// Evaluates is true: the corpus always has validation windows.
func (p *pretrainTask) Evaluates() bool { return true }

// Evaluate measures the held-out loss on the validation windows.
func (p *pretrainTask) Evaluate(m *train.Metrics) (float64, error) {
	return p.eval.record(p.setup.State.Params(), p.cfg.Model.ZLoss, m)
}

// Save writes a whole checkpoint: the model and the optimizer state.
func (p *pretrainTask) Save(root string, rs train.RunState) (string, error) {
	specs := p.t.Model.Specs
	names := make([]string, len(specs))
	for i, s := range specs {
		names[i] = s.Name
	}
	st := p.setup.State
	return train.SaveCheckpoint(root, rs, names, st.Params(), p.setup.Optimizer.StateNames(), st.OptState())
}

// Close releases what Open built.
func (p *pretrainTask) Close() {
	if p.prefetch != nil {
		p.prefetch.Stop()
	}
	p.stream.Free()
	p.eval.Free()
	p.galore.Free()
	p.sophia.Free()
	p.setup.Free()
}
