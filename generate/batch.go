package generate

import (
	"math/bits"
	"slices"

	"github.com/posttrainllm/posttrainllm/mlx"
	"github.com/posttrainllm/posttrainllm/model"
)

// batch is an Engine's running state, touched by its loop goroutine alone:
// the rows in their slots of the key/value cache, the jobs waiting for
// rows, and the compiled decode steps.
type batch struct {
	e       *Engine
	cache   *model.SlotCache // nil while no row runs
	rows    []*row           // by slot; nil for a free slot
	waiting []*job
	// decode holds the compiled decode step of each sampling mode: rows
	// all greedy skip the draw, rows without top-k or top-p the sort.
	decode [3]*mlx.Closure
	// adapters are the adapters registered, stacked for the rows (nil for
	// none); adapted holds the decode steps of a batch with adapter rows,
	// by the stacked rows' layout.
	adapters *adapterBank
	adapted  map[string]*[3]*mlx.Closure
	// inFlight is the decode step scheduled last and not read yet: the
	// next step is scheduled on its sampled tokens, still on the device,
	// before its results are read, so the host builds one step while the
	// device computes the other.
	inFlight *decoded
}

// rowState is where a row is in its life.
type rowState int

const (
	reading  rowState = iota // its prompt is read into its slot, chunk by chunk
	copying                  // it waits for its group's leader to read their prompt
	decoding                 // it is fed one token per decode step
)

// row is one completion in one slot of the cache.
type row struct {
	job      *job
	stream   *Stream
	slot     int
	state    rowState
	sampling rowSampling
	length   int   // positions written into the slot
	next     int32 // the token to feed at position length (decoding)
	// group is the job's rows; the first reads the prompt, the others
	// copy it.
	group []*row
}

func newBatch(e *Engine) *batch { return &batch{e: e} }

// occupied is the number of slots in use.
func (b *batch) occupied() int {
	n := 0
	for _, r := range b.rows {
		if r != nil {
			n++
		}
	}
	return n
}

// step runs one round of the loop with params: it drops cancelled rows,
// admits waiting jobs, reads up to a chunk of prompt tokens and runs one
// decode step. worked is false when there was nothing to do.
func (b *batch) step(params []*mlx.Array) (worked bool, err error) {
	b.dropEnded()
	b.admit()
	reads := b.planReads()
	running := 0
	for _, r := range b.rows {
		if r != nil && r.state == decoding {
			running++
		}
	}
	if len(reads) == 0 && running == 0 {
		if b.inFlight != nil { // the last step's tokens are still to be read
			return true, mlx.Do(func() error { return b.collect() })
		}
		if b.occupied() == 0 && b.cache != nil {
			mlx.Do(func() error { b.cache.Free(); return nil })
			b.cache, b.rows = nil, nil
		}
		return false, nil
	}
	err = mlx.Do(func() error {
		s := mlx.NewScope()
		defer s.Close()
		if b.relayout(reads) && b.inFlight != nil {
			// The step in flight names rows by slot: read it before the
			// slots move, then plan again for the rows still running.
			if err := b.collect(); err != nil {
				return err
			}
		}
		if err := b.layout(reads); err != nil {
			return err
		}
		if len(reads) > 0 {
			if err := b.read(params, reads); err != nil {
				return err
			}
		}
		if running > 0 {
			if err := b.decodeStep(params); err != nil {
				return err
			}
		}
		s.Keep(b.cache.Arrays()...)
		if b.inFlight != nil {
			s.Keep(b.inFlight.outs[:]...)
		}
		return nil
	})
	return true, err
}

// dropEnded ends the rows and waiting jobs whose context is done and the
// decoding rows their reader stopped.
func (b *batch) dropEnded() {
	for _, r := range b.rows {
		if r == nil {
			continue
		}
		if err := r.job.ctx.Err(); err != nil {
			b.end(r, "", err)
		} else if r.state == decoding && r.stream.stop.Load() {
			b.end(r, FinishStop, nil)
		}
	}
	b.waiting = slices.DeleteFunc(b.waiting, func(j *job) bool {
		if err := j.ctx.Err(); err != nil {
			b.fail([]*job{j}, err)
			return true
		}
		return false
	})
}

// admit gives waiting jobs rows, in arrival order, while the batch has
// room for all of a job's completions.
func (b *batch) admit() {
	maxBatch := b.e.opts.MaxBatch
	for len(b.waiting) > 0 {
		j := b.waiting[0]
		if b.occupied()+j.seq.N > maxBatch {
			return
		}
		b.waiting = b.waiting[1:]
		group := make([]*row, j.seq.N)
		for i := range group {
			group[i] = &row{job: j, stream: j.streams[i], state: copying, slot: -1,
				sampling: newRowSampling(j.seq.Sampling, b.e.net.Config.VocabSize, i)}
			b.place(group[i])
		}
		for _, g := range group {
			g.group = group
		}
		group[0].state = reading
	}
}

// place puts r in a free slot, adding one when none is free (layout
// gives the cache its new slots before the next MLX work).
func (b *batch) place(r *row) {
	for s, o := range b.rows {
		if o == nil {
			b.rows[s], r.slot = r, s
			return
		}
	}
	b.rows = append(b.rows, r)
	r.slot = len(b.rows) - 1
}

// readPlan is a chunk of a prompt to read into a row's slot.
type readPlan struct {
	r          *row
	start, end int // prompt positions
}

// planReads chooses this round's prompt chunks: rows in arrival order,
// PrefillChunk tokens in all.
func (b *batch) planReads() []readPlan {
	var plans []readPlan
	budget := b.e.opts.PrefillChunk
	for _, r := range b.rows {
		if r == nil || r.state != reading || budget == 0 {
			continue
		}
		n := min(budget, len(r.job.seq.Prompt)-r.length)
		plans = append(plans, readPlan{r: r, start: r.length, end: r.length + n})
		budget -= n
	}
	slices.SortFunc(plans, func(a, b readPlan) int { return int(a.r.job.order - b.r.job.order) })
	return plans
}

// relayout says whether layout would change the cache for this round.
func (b *batch) relayout(reads []readPlan) bool {
	if b.cache == nil {
		return true
	}
	slots, capacity := b.target(reads)
	have, room := b.cache.Slots(), b.cache.Capacity()
	return slots > have || len(b.rows) > have || capacity > room || slots <= have/2 || capacity <= room/4
}

// target is the slots and capacity this round's rows need.
func (b *batch) target(reads []readPlan) (slots, capacity int) {
	need := 1
	for _, r := range b.rows {
		if r != nil {
			need = max(need, r.length+1)
		}
	}
	for _, rd := range reads {
		need = max(need, rd.end+1)
	}
	return pow2(b.occupied()), min(b.e.net.Config.Context, pow2(max(need, 32)))
}

// layout sizes the cache for this round: slots a power of two at least
// the rows in use (compacting the rows into the first slots when they fit
// in half), and a capacity a power of two at least every row's length
// after this round (up to the model's context). Call on the MLX thread.
func (b *batch) layout(reads []readPlan) error {
	slots, capacity := b.target(reads)
	if b.cache == nil {
		cache, err := b.e.net.NewSlotCache(slots, capacity)
		if err != nil {
			return err
		}
		b.cache = cache
		b.compact(slots, 0)
		b.e.stats.rearranged.Add(1)
		return nil
	}
	have, room := b.cache.Slots(), b.cache.Capacity()
	grow := slots > have || len(b.rows) > have || capacity > room
	shrink := slots <= have/2 || capacity <= room/4
	if !grow && !shrink {
		return nil
	}
	if !grow {
		capacity = min(room, max(capacity, room/4))
		slots = min(have, slots)
	} else {
		capacity = max(capacity, room)
		slots = max(slots, have)
	}
	from := b.compact(slots, have)
	b.e.stats.rearranged.Add(1)
	return b.cache.Rearrange(from, capacity)
}

// compact moves the rows in use into slots 0…n−1 (in slot order) of a
// cache of slots slots and returns, for each new slot, the old slot its
// keys and values come from (−1 for none: rows placed beyond the have
// slots the cache had are new).
func (b *batch) compact(slots, have int) []int {
	from := make([]int, slots)
	rows := make([]*row, slots)
	n := 0
	for s, r := range b.rows {
		if r == nil {
			continue
		}
		from[n], rows[n] = s, r
		if s >= have {
			from[n] = -1
		}
		r.slot = n
		n++
	}
	for i := n; i < slots; i++ {
		from[i] = -1
	}
	b.rows = rows
	return from
}

// free releases the cache.
func (b *batch) free() {
	b.dropInFlight()
	if b.cache != nil {
		mlx.Do(func() error { b.cache.Free(); return nil })
		b.cache = nil
	}
	for _, c := range b.decode {
		if c != nil {
			c.Free()
		}
	}
	for _, steps := range b.adapted {
		for _, c := range steps {
			if c != nil {
				c.Free()
			}
		}
	}
	if b.adapters != nil {
		mlx.Do(func() error { b.adapters.rows.Free(); return nil })
	}
}

// fail ends every completion of jobs with err.
func (b *batch) fail(jobs []*job, err error) {
	for _, j := range jobs {
		for _, s := range j.streams {
			finish(s, "", err)
		}
	}
}

// failAll ends every row and waiting job with err and drops the cache.
func (b *batch) failAll(err error) {
	for _, r := range b.rows {
		if r != nil {
			b.end(r, "", err)
		}
	}
	b.fail(b.waiting, err)
	b.waiting = nil
	b.dropInFlight()
	if b.cache != nil {
		mlx.Do(func() error { b.cache.Free(); return nil })
	}
	b.cache, b.rows = nil, nil
}

// end finishes row r with reason (or err) and frees its slot.
func (b *batch) end(r *row, reason FinishReason, err error) {
	finish(r.stream, reason, err)
	if r.slot >= 0 && r.slot < len(b.rows) && b.rows[r.slot] == r {
		b.rows[r.slot] = nil
	}
	r.slot = -1
}

// finish closes stream s with reason, or with err when not nil.
func finish(s *Stream, reason FinishReason, err error) {
	select {
	case <-s.done:
		return
	default:
	}
	s.result.FinishReason, s.err = reason, err
	close(s.tokens)
	close(s.done)
}

// accept takes token t sampled for row r after fed positions of its slot
// were written: a stop token ends the row; otherwise the token is the
// row's and is sent, and the row ends when it has its budget of tokens or
// prompt and completion fill the model's context.
func (b *batch) accept(r *row, t Token, fed int) {
	id := t.ID
	res := &r.stream.result
	if slices.Contains(r.job.seq.StopTokens, id) {
		res.StopToken, res.StopLogprob = id, t.Logprob
		b.end(r, FinishStop, nil)
		return
	}
	res.Tokens = append(res.Tokens, id)
	res.Logprobs = append(res.Logprobs, t.Logprob)
	res.Top = append(res.Top, t.Top)
	res.TopLogprobs = append(res.TopLogprobs, t.TopLogprob)
	r.stream.tokens <- t
	if len(res.Tokens) >= r.job.seq.MaxTokens || fed+1 >= b.e.net.Config.Context {
		b.end(r, FinishLength, nil)
		return
	}
	r.next = id
}

// pow2 is the smallest power of two >= n (1 for n <= 1).
func pow2(n int) int {
	if n <= 1 {
		return 1
	}
	return 1 << bits.Len(uint(n-1))
}
