package train

import (
	"fmt"
	"time"

	"github.com/posttrainllm/posttrainllm/checkpoint"
	"github.com/posttrainllm/posttrainllm/mlx"
)

// Best is the lowest held-out loss of a run so far: the step it was
// measured at, its value, the evaluations since (which Config.Patience
// counts) and, under Config.KeepBest, its checkpoint.
type Best struct {
	Step       int     `json:"step"`
	ValLoss    float64 `json:"val_loss"`
	EvalsSince int     `json:"evals_since"`
	Checkpoint string  `json:"checkpoint,omitempty"`
}

// runState is the run state a checkpoint of the run now records.
func (r *run) runState() RunState {
	rs := RunState{Step: r.step, Config: r.cfg, SamplerState: r.samplerState,
		TokensSeen: r.tokensSeen, ElapsedSeconds: (r.before + time.Since(r.start)).Seconds()}
	if r.best != nil {
		b := *r.best
		rs.Best = &b
	}
	return rs
}

// noteEval records the held-out loss v just measured (rank 0): a new
// best, saved under checkpoint.BestRoot with Config.KeepBest, or one more
// evaluation without improvement.
func (r *run) noteEval(v float64) error {
	if r.best != nil && !(v < r.best.ValLoss) {
		r.best.EvalsSince++
		return nil
	}
	r.best = &Best{Step: r.step, ValLoss: v}
	if !r.cfg.KeepBest {
		return nil
	}
	root := checkpoint.BestRoot(r.env.RunDir)
	dir, err := r.task.Save(root, r.runState())
	if err != nil {
		return fmt.Errorf("best checkpoint: %w", err)
	}
	if err := checkpoint.Prune(root, 1); err != nil {
		return fmt.Errorf("best checkpoint: pruning: %w", err)
	}
	r.best.Checkpoint = dir
	return nil
}

// stopEarly says, after an evaluation, whether the run stops for
// Config.Patience: rank 0 decides, and in a data-parallel run every rank
// learns its decision through a sum across the group, so that all of them
// stop at the same step.
func (r *run) stopEarly() (bool, error) {
	if r.cfg.Patience == 0 {
		return false, nil
	}
	stop := r.lead() && r.best != nil && r.best.EvalsSince >= r.cfg.Patience
	if r.env.Group.Size() < 2 {
		return stop, nil
	}
	flag := 0.0
	if stop {
		flag = 1
	}
	a := mlx.Scalar(flag, mlx.Float32)
	sum := mlx.AllSum(a, r.env.Group)
	defer mlx.Free(a, sum)
	v, err := sum.Item()
	if err != nil {
		return false, fmt.Errorf("early stop: agreeing across ranks: %w", err)
	}
	return v > 0, nil
}

// noteBest copies the run's best held-out loss into the summary.
func (sum *Summary) noteBest(b *Best) {
	if b != nil {
		c := *b
		sum.Best = &c
	}
}
