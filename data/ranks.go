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

// fillShard is Fill for a sampler with a shard of size > 1: it draws the
// windows of every rank, in the order one process would, and copies its
// own. Drawing a start costs a random number; only the kept windows are
// copied.
func (s *Sampler) fillShard(x, y []int32) {
	t, sh := s.context, s.shard
	n := len(x) / t
	if n%sh.rows != 0 {
		panic(fmt.Sprintf("data: Sampler.Fill: %d windows on a shard of %d rows per microbatch, want a multiple", n, sh.rows))
	}
	starts := uint64(s.view.Len() - t)
	global := sh.rows * sh.size // windows per microbatch of the whole run
	for g := 0; g < n*sh.size; g++ {
		start := int(s.rng.Uint64N(starts))
		mb, row := g/global, g%global
		if row/sh.rows != sh.rank {
			continue
		}
		off := (mb*sh.rows + row%sh.rows) * t
		s.view.CopyInto(x[off:off+t], start)
		s.view.CopyInto(y[off:off+t], start+1)
	}
}
