package finetune

import (
	"fmt"

	"github.com/posttrainllm/posttrainllm/data"
	"github.com/posttrainllm/posttrainllm/step"
)

// RowFeed feeds a fine-tune's updates with its training rows: a
// data.RowSampler's seeded epochs, sharded across the ranks of a
// data-parallel group (data.RowSampler.Shard), in the plan's shape. An
// objective's run (ObjectiveRun) draws its rows from one, adding its own
// row weights and inputs to the batches.
type RowFeed struct {
	sampler *data.RowSampler
	batch   *data.WeightedBatch
}

// NewRowFeed returns the feed of env.Train for a run of env.Config under
// env.Plan on this rank of env.Group (nil: alone), resuming after
// env.SamplerState (nil: from the start).
func NewRowFeed(env ObjectiveEnv) (*RowFeed, error) {
	rows, cfg, g := env.Train, env.Config, env.Group
	sampler, err := data.NewRowSampler(rows, cfg.Seed)
	if err != nil {
		return nil, err
	}
	if g.Size() > 1 {
		if err := sampler.Shard(g.Rank(), g.Size(), cfg.Batch); err != nil {
			return nil, err
		}
	}
	if env.SamplerState != nil {
		if err := sampler.SetState(env.SamplerState); err != nil {
			return nil, fmt.Errorf("resume: %w", err)
		}
	}
	batch, err := data.NewWeightedBatch(env.Plan.Steps, env.Plan.MicroBatch, rows.T)
	if err != nil {
		return nil, err
	}
	return &RowFeed{sampler: sampler, batch: batch}, nil
}

// Next fills the feed's batch with the next update's rows. The batch's
// buffers are reused: the step copies them before Next is called again.
func (f *RowFeed) Next() (step.Batch, error) {
	if err := f.sampler.FillBatch(f.batch); err != nil {
		return step.Batch{}, err
	}
	b := f.batch
	return step.Batch{X: b.X, Y: b.Y, W: b.W, WeightSum: b.WeightSum, Seg: b.Seg, N: b.N, B: b.B, T: b.T}, nil
}

// Index returns the training rows of the last batch, in its [N, B]
// order; the feed reuses the slice.
func (f *RowFeed) Index() []int { return f.batch.Index }

// AppendState appends the sampler state after the last batch to b.
func (f *RowFeed) AppendState(b []byte) []byte { return append(b, f.batch.State...) }
