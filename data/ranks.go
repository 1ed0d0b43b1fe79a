package data

import "fmt"

// shard is the part of a sampler's stream that one rank of a data-parallel
// run keeps (Sampler.Shard).
type shard struct {
	rank, size, rows int
}

// Shard makes the sampler draw rank's share of a data-parallel run of size
// ranks with rows sequences per rank and microbatch. Every rank draws the
// same seeded stream of windows that one process with size × rows
// sequences per microbatch would draw, and keeps, of each microbatch's
// size·rows windows, those at rows rank·rows … (rank+1)·rows−1. So size
// ranks with batch B together see exactly the windows of one process with
// batch size·B, and the random state after a batch is the same on every
// rank: one rank's checkpointed State resumes all of them. Fill then takes
// a multiple of rows windows. Size 1 is the whole stream.
func (s *Sampler) Shard(rank, size, rows int) error {
	if size < 1 || rank < 0 || rank >= size || rows < 1 {
		return fmt.Errorf("sampler shard: rank %d of %d with %d rows, want 0 <= rank < size and rows >= 1", rank, size, rows)
	}
	s.shard = shard{rank: rank, size: size, rows: rows}
	return nil
}

// Shard makes the row sampler draw rank's share of a data-parallel
// fine-tune of size ranks with rows rows per rank and microbatch, as
// Sampler.Shard does for windows: every rank draws the rows one process
// with size × rows rows per microbatch would draw, in the same order, and
// keeps those at rows rank·rows … (rank+1)·rows−1 of each microbatch. So
// the ranks together see exactly that process's rows, each knows the
// weight total of all of them (WeightedBatch.WeightSum), and the sampler
// state after a batch is the same on every rank. FillBatch then takes a
// multiple of rows rows. Size 1 keeps every row.
func (s *RowSampler) Shard(rank, size, rows int) error {
	if size < 1 || rank < 0 || rank >= size || rows < 1 {
		return fmt.Errorf("row sampler shard: rank %d of %d with %d rows, want 0 <= rank < size and rows >= 1", rank, size, rows)
	}
	s.shard = shard{rank: rank, size: size, rows: rows}
	return nil
}
