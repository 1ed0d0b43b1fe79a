package train

import (
	"fmt"

	"github.com/posttrainllm/posttrainllm/data"
	"github.com/posttrainllm/posttrainllm/mlx"
)

// rowFeed feeds a fine-tune's updates with its records' rows: a
// data.RowSampler's seeded epochs, sharded across the ranks of a
// data-parallel group (data.RowSampler.Shard), in the plan's shape.
type rowFeed struct {
	sampler *data.RowSampler
	batch   *data.WeightedBatch
}

// newRowFeed returns the feed of rows for a run of cfg under plan on this
// rank of g (nil: alone), resuming after the sampler state (nil: from the
// start).
func newRowFeed(rows *data.Rows, cfg Config, plan Plan, g *mlx.Group, state []byte) (*rowFeed, error) {
	sampler, err := data.NewRowSampler(rows, cfg.Seed)
	if err != nil {
		return nil, err
	}
	if g.Size() > 1 {
		if err := sampler.Shard(g.Rank(), g.Size(), cfg.Batch); err != nil {
			return nil, err
		}
	}
	if state != nil {
		if err := sampler.SetState(state); err != nil {
			return nil, fmt.Errorf("resume: %w", err)
		}
	}
	batch, err := data.NewWeightedBatch(plan.Steps, plan.MicroBatch, rows.T)
	if err != nil {
		return nil, err
	}
	return &rowFeed{sampler: sampler, batch: batch}, nil
}

// next fills the feed's batch with the next update's rows. The batch's
// buffers are reused: the step copies them before next is called again.
func (f *rowFeed) next() (Batch, error) {
	if err := f.sampler.FillBatch(f.batch); err != nil {
		return Batch{}, err
	}
	b := f.batch
	return Batch{X: b.X, Y: b.Y, W: b.W, WeightSum: b.WeightSum, Seg: b.Seg, N: b.N, B: b.B, T: b.T}, nil
}

// appendState appends the sampler state after the last batch to b.
func (f *rowFeed) appendState(b []byte) []byte { return append(b, f.batch.State...) }
