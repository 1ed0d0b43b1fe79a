package pretrain

import (
	"context"
	"fmt"

	"github.com/posttrainllm/posttrainllm/mlx"
	"github.com/posttrainllm/posttrainllm/model"
	"github.com/posttrainllm/posttrainllm/train"
)

// Trainer trains a Transformer on a Dataset, writing metrics and checkpoints
// into a run folder.
type Trainer struct {
	Config train.Config
	Model  *model.Transformer
	Data   *Dataset
	RunDir string
	Hooks  train.Hooks
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
func New(cfg train.Config, ds *Dataset, runDir string) (*Trainer, error) {
	cfg = cfg.WithDefaults()
	if cfg.Model.VocabSize == 0 {
		cfg.Model.VocabSize = ds.Tokenizer.VocabSize()
	}
	cfg, m, err := train.Prepare(cfg)
	if err != nil {
		return nil, err
	}
	if err := train.CheckTokenizer(ds.Tokenizer, cfg); err != nil {
		return nil, fmt.Errorf("the dataset: %w", err)
	}
	return &Trainer{Config: cfg, Model: m, Data: ds, RunDir: runDir}, nil
}

// Run trains from scratch, or from the checkpoint directory resumeFrom,
// until Config.Steps updates are done or ctx is cancelled (then it writes
// a checkpoint and returns train.ErrInterrupted). It runs on the MLX thread
// (mlx.Do), and so do the Hooks it calls: they may use MLX, but must not
// wait for another goroutine that does.
func (t *Trainer) Run(ctx context.Context, resumeFrom string) (train.Summary, error) {
	env := train.TaskEnv{Config: t.Config, RunDir: t.RunDir, ResumeFrom: resumeFrom, Group: t.Group}
	return train.RunLoop(ctx, &pretrainTask{t: t}, env, t.Hooks)
}
