package data

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
)

// Rows are fine-tuning sequences of one context length T, the static
// shape of every batch: row r is X[r·T:(r+1)·T], its next-token targets Y
// and the targets' loss weights W (1 where the target counts, 0 for prompt
// tokens and padding).
type Rows struct {
	T    int
	X, Y []int32
	W    []float32
	// Seg, for packed rows only, numbers the example each input position
	// belongs to within its row (0, 1, …; padding after the last example
	// gets a number of its own): the segments of document masking
	// (model.Transformer.PackedLossTerms). nil for rows of one example each.
	Seg []int32
	// Truncated counts examples longer than the context, cut to its
	// length (their tail is not trained on); NoTargets counts rows in
	// which no target counts, such as a prompt that fills the context
	// (for Pairs, the pairs left out for it).
	Truncated, NoTargets int
	// Pairs says the rows are preference pairs (BuildPairRows): row 2i
	// the chosen answer of pair i, row 2i+1 its rejected one. Samplers
	// then draw whole pairs, so both rows of a pair sit side by side in
	// one microbatch.
	Pairs bool
}

// Len is the number of rows.
func (r *Rows) Len() int { return len(r.X) / r.T }

// Targets counts the targets that count in the loss.
func (r *Rows) Targets() int {
	n := 0
	for _, w := range r.W {
		if w > 0 {
			n++
		}
	}
	return n
}

// add appends one row from tokens and flags of up to T+1 tokens: inputs
// tokens[:n-1], targets tokens[1:], and the weight of each target the
// flag of the target token itself (flags[1:]): the prediction of token
// t+1 counts when token t+1 is a completion token, whatever token t is.
// Short rows are padded with pad, weight 0.
func (r *Rows) add(tokens []int32, flags []bool, pad int32) {
	T := r.T
	counted := false
	for i := 0; i < T; i++ {
		x, y, w := pad, pad, float32(0)
		if i+1 < len(tokens) {
			x, y = tokens[i], tokens[i+1]
			if flags[i+1] {
				w, counted = 1, true
			}
		}
		r.X, r.Y, r.W = append(r.X, x), append(r.Y, y), append(r.W, w)
	}
	if !counted {
		r.NoTargets++
	}
}

// addPacked is add for a packed row: docs[i] is the example of token i;
// a target counts only within the example of its input position, and Seg
// takes the examples numbered from the row's first.
func (r *Rows) addPacked(tokens []int32, flags []bool, docs []int32, pad int32) {
	T := r.T
	counted := false
	last := int32(0)
	for i := 0; i < T; i++ {
		x, y, w, seg := pad, pad, float32(0), last+1
		if i+1 < len(tokens) {
			x, y, seg = tokens[i], tokens[i+1], docs[i]-docs[0]
			if flags[i+1] && docs[i+1] == docs[i] {
				w, counted = 1, true
			}
			last = seg
		}
		r.X, r.Y, r.W, r.Seg = append(r.X, x), append(r.Y, y), append(r.W, w), append(r.Seg, seg)
	}
	if !counted {
		r.NoTargets++
	}
}

// BuildRows lays examples out in rows of T targets. Padded (pack false),
// each example is one row, cut after T+1 tokens and padded with pad, as
// mlx-lm and TRL do without packing. Packed, the examples are concatenated
// (each ends in EOT) and cut into consecutive rows of T targets, so no
// position is padding but at the very end; Seg numbers the examples of
// each row, so that positions attend only within their own example
// (document masking), and the target that would predict an example's
// first token from the previous example's last does not count. An example
// cut by a row's end continues in the next row, without the context of
// its first part. An example of fewer than two
// tokens has no target and is left out; a set of rows with no counted
// target at all is an error.
func BuildRows(examples []Example, T int, pad int32, pack bool) (*Rows, error) {
	if T < 1 {
		return nil, fmt.Errorf("rows: context %d, want >= 1", T)
	}
	r := &Rows{T: T}
	if pack {
		var tokens, docs []int32
		var flags []bool
		for k, e := range examples {
			tokens, flags = append(tokens, e.Tokens...), append(flags, e.Train...)
			for range e.Tokens {
				docs = append(docs, int32(k))
			}
		}
		for start := 0; start+1 < len(tokens); start += T {
			end := min(start+T+1, len(tokens))
			r.addPacked(tokens[start:end], flags[start:end], docs[start:end], pad)
		}
	} else {
		for _, e := range examples {
			if len(e.Tokens) < 2 {
				continue
			}
			n := len(e.Tokens)
			if n > T+1 {
				r.Truncated++
				n = T + 1
			}
			r.add(e.Tokens[:n], e.Train[:n], pad)
		}
	}
	if r.Len() == 0 || r.Targets() == 0 {
		return nil, errors.New("rows: no example has a target that counts in the loss within the context")
	}
	return r, nil
}

// WeightedBatch is one optimizer update's rows: N microbatches of B rows
// of T tokens, laid out [N, B, T] like Batch, with loss weights W.
type WeightedBatch struct {
	X, Y    []int32
	W       []float32
	N, B, T int
	// Seg holds the rows' Seg when they are packed (FillBatch sets it),
	// nil otherwise.
	Seg []int32
	// WeightSum is the total of the update's loss weights: of W itself,
	// or, from a sharded sampler (RowSampler.Shard), of the rows of every
	// rank, so that each rank normalises its loss by the global count of
	// counted targets, as one process with all the rows would.
	WeightSum float64
	// State is the sampler state after the batch (RowSampler.SetState
	// resumes with the next one).
	State []byte
	// Index holds the index in the sampled Rows of each of the batch's
	// N·B rows (FillBatch sets it), for inputs kept per row beside the
	// rows, such as a preference fine-tune's reference log-probabilities.
	Index []int
}

// NewWeightedBatch allocates a batch of n microbatches of b rows of t
// tokens.
func NewWeightedBatch(n, b, t int) (*WeightedBatch, error) {
	if err := checkBatchShape(n, b, t); err != nil {
		return nil, err
	}
	size := n * b * t
	return &WeightedBatch{X: make([]int32, size), Y: make([]int32, size), W: make([]float32, size), N: n, B: b, T: t}, nil
}

// RowSampler draws rows in epochs: each epoch visits every row once, in
// an order shuffled by the seed and the epoch number. Its state (epoch and
// position) restores exactly, so a resumed fine-tune sees the rows it
// would have seen. It is not safe for concurrent use.
type RowSampler struct {
	rows       *Rows
	seed       uint64
	epoch, pos int
	perm       []int
	shard      shard // the zero value keeps every row
	half       int   // for pairs: 1 between a pair's chosen and rejected row
}

// NewRowSampler returns a sampler over rows seeded with seed.
func NewRowSampler(rows *Rows, seed uint64) (*RowSampler, error) {
	if rows == nil || rows.Len() == 0 {
		return nil, errors.New("row sampler: no rows")
	}
	s := &RowSampler{rows: rows, seed: seed}
	s.shuffle()
	return s, nil
}

// unit is the number of consecutive rows drawn together: 2 for
// preference pairs, else 1.
func (s *RowSampler) unit() int {
	if s.rows.Pairs {
		return 2
	}
	return 1
}

// shuffle draws the permutation of the current epoch, over pairs of rows
// for preference pairs.
func (s *RowSampler) shuffle() {
	s.perm = rand.New(rand.NewPCG(s.seed, uint64(s.epoch))).Perm(s.rows.Len() / s.unit())
}

// Epoch returns the number of completed passes over the rows.
func (s *RowSampler) Epoch() int { return s.epoch }

// FillBatch copies the next batch.N·batch.B rows into batch, sets
// batch.WeightSum, records the state after them in batch.State and their
// indices in batch.Index. On a shard (Shard) it draws the rows of every
// rank and copies its own. Preference pairs (Rows.Pairs) are drawn whole,
// which needs an even batch.B and, on a shard, an even share per rank.
func (s *RowSampler) FillBatch(batch *WeightedBatch) error {
	T := s.rows.T
	if batch.T != T {
		return fmt.Errorf("row batch T = %d, want the rows' context %d", batch.T, T)
	}
	n := batch.N * batch.B
	if size := n * T; len(batch.X) != size || len(batch.Y) != size || len(batch.W) != size {
		return fmt.Errorf("row batch [N=%d, B=%d, T=%d] has buffers of %d, %d and %d, want %d",
			batch.N, batch.B, T, len(batch.X), len(batch.Y), len(batch.W), size)
	}
	if sh := s.shard; sh.size > 1 && n%sh.rows != 0 {
		return fmt.Errorf("row batch of %d rows on a shard of %d rows per microbatch, want a multiple", n, sh.rows)
	}
	if u := s.unit(); batch.B%u != 0 || (s.shard.size > 1 && s.shard.rows%u != 0) {
		return fmt.Errorf("row batch of %d rows per microbatch (%d per rank) over preference pairs, want even numbers (chosen and rejected side by side)", batch.B, s.shard.rows)
	}
	if s.rows.Seg != nil && len(batch.Seg) != len(batch.X) {
		batch.Seg = make([]int32, len(batch.X))
	}
	if len(batch.Index) != n {
		batch.Index = make([]int, n)
	}
	total := 0.0
	keepDraws(s.shard, n, func() int {
		r := s.nextRow()
		for _, w := range s.rows.W[r*T : (r+1)*T] {
			total += float64(w)
		}
		return r
	}, func(k, r int) {
		batch.Index[k] = r
		copy(batch.X[k*T:(k+1)*T], s.rows.X[r*T:(r+1)*T])
		copy(batch.Y[k*T:(k+1)*T], s.rows.Y[r*T:(r+1)*T])
		copy(batch.W[k*T:(k+1)*T], s.rows.W[r*T:(r+1)*T])
		if s.rows.Seg != nil {
			copy(batch.Seg[k*T:(k+1)*T], s.rows.Seg[r*T:(r+1)*T])
		}
	})
	batch.WeightSum = total
	batch.State = s.AppendState(batch.State[:0])
	return nil
}

// nextRow returns the index of the next row, starting a new epoch after
// the last: for preference pairs, the chosen row of the next pair, then
// its rejected row.
func (s *RowSampler) nextRow() int {
	u := s.unit()
	if s.half == 0 {
		if s.pos == len(s.perm) {
			s.epoch, s.pos = s.epoch+1, 0
			s.shuffle()
		}
		s.pos++
	}
	r := s.perm[s.pos-1]*u + s.half
	s.half = (s.half + 1) % u
	return r
}

// rowStateMagic starts a RowSampler state.
const rowStateMagic = "PTLMRWS1"

// AppendState appends the sampler's state (epoch, position, row count)
// to b.
func (s *RowSampler) AppendState(b []byte) []byte {
	b = append(b, rowStateMagic...)
	b = binary.LittleEndian.AppendUint64(b, uint64(s.epoch))
	b = binary.LittleEndian.AppendUint64(b, uint64(s.pos))
	return binary.LittleEndian.AppendUint64(b, uint64(s.rows.Len()))
}

// SetState restores a state from AppendState, checking that it belongs to
// a sampler over as many rows.
func (s *RowSampler) SetState(b []byte) error {
	if len(b) != len(rowStateMagic)+24 || string(b[:len(rowStateMagic)]) != rowStateMagic {
		return errors.New("row sampler state: not a row sampler state")
	}
	b = b[len(rowStateMagic):]
	epoch, pos, n := binary.LittleEndian.Uint64(b), binary.LittleEndian.Uint64(b[8:]), binary.LittleEndian.Uint64(b[16:])
	if n != uint64(s.rows.Len()) {
		return fmt.Errorf("row sampler state: saved over %d rows, the data has %d", n, s.rows.Len())
	}
	if pos > n/uint64(s.unit()) || epoch > 1<<40 {
		return fmt.Errorf("row sampler state: epoch %d position %d over %d rows is not valid", epoch, pos, n)
	}
	s.epoch, s.pos, s.half = int(epoch), int(pos), 0
	s.shuffle()
	return nil
}
