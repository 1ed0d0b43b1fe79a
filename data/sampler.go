package data

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
)

// samplerStateMagic starts every Sampler state.
const samplerStateMagic = "PTLMSMP1"

// samplerSeed2 is the second PCG seed word, fixed so that the user's seed
// alone selects the stream.
const samplerSeed2 = 0x9e3779b97f4a7c15

// Sampler draws random training windows from a View: a window at start s is
// x = tokens[s:s+T] and y = tokens[s+1:s+T+1], the targets of next-token
// prediction, with s uniform over every start that fits.
//
// Its random state is a PCG generator that State and SetState save and
// restore exactly, so training resumed from a checkpoint sees the same
// windows it would have seen without the interruption. A Sampler is not
// safe for concurrent use.
type Sampler struct {
	view    View
	context int
	pcg     *rand.PCG
	rng     *rand.Rand
	shard   shard       // the zero value keeps the whole stream
	dropout *BPEDropout // re-encodes each window (SetBPEDropout), or nil
}

// NewSampler returns a sampler of windows of context tokens from view,
// seeded with seed. The view must hold at least context+1 tokens.
func NewSampler(view View, context int, seed uint64) (*Sampler, error) {
	if context < 1 {
		return nil, fmt.Errorf("sampler: context %d, want at least 1", context)
	}
	if view.Len() <= context { // not < context+1, which overflows for context = MaxInt
		return nil, fmt.Errorf("sampler: view has %d tokens, want at least context+1 = %d (context %d)",
			view.Len(), uint64(context)+1, context)
	}
	pcg := rand.NewPCG(seed, samplerSeed2)
	return &Sampler{view: view, context: context, pcg: pcg, rng: rand.New(pcg)}, nil
}

// Context returns the window length T.
func (s *Sampler) Context() int { return s.context }

// View returns the tokens the sampler draws from.
func (s *Sampler) View() View { return s.view }

// Fill draws len(x)/T windows into x and their targets into y, window k at
// x[k*T:(k+1)*T] (on a Shard, this rank's windows of the whole run's
// draw). Without BPE-dropout (SetBPEDropout) it does not allocate. It
// panics unless len(x) == len(y)
// and len(x) is a multiple of T.
func (s *Sampler) Fill(x, y []int32) {
	t := s.context
	if len(x) != len(y) || len(x)%t != 0 {
		panic(fmt.Sprintf("data: Sampler.Fill: len(x) = %d, len(y) = %d, want equal multiples of the context %d", len(x), len(y), t))
	}
	if s.dropout != nil {
		s.fillDropout(x, y)
		return
	}
	s.eachWindow(len(x)/t, func(k, start int) {
		s.view.CopyInto(x[k*t:(k+1)*t], start)
		s.view.CopyInto(y[k*t:(k+1)*t], start+1)
	})
}

// FillStarts draws len(starts) windows as Fill does, from the same random
// stream, but records where each starts in the view instead of copying its
// tokens: window k is x = View[starts[k] : starts[k]+T] and y the T tokens
// one further. A consumer holding the view's tokens elsewhere (a GPU, where
// train.TokenStream gathers the windows) needs only these N·B integers per
// batch. Fill and FillStarts from the same state describe the same
// windows and leave the same state. Re-encoded windows (SetBPEDropout) are
// not slices of the view, and a view longer than an int32 can index has
// starts that do not fit: both are refused. On a Shard, starts takes a
// multiple of the shard's rows, as Fill does.
func (s *Sampler) FillStarts(starts []int32) error {
	if s.dropout != nil {
		return errors.New("sampler: window starts of a sampler with BPE-dropout, whose windows are re-encoded, not slices of the view; use Fill")
	}
	if n := s.view.Len(); n > math.MaxInt32 {
		return fmt.Errorf("sampler: window starts in a view of %d tokens, want at most %d (int32 starts)", n, math.MaxInt32)
	}
	if sh := s.shard; sh.size > 1 && len(starts)%sh.rows != 0 {
		return fmt.Errorf("sampler: %d window starts on a shard of %d rows per microbatch, want a multiple", len(starts), sh.rows)
	}
	s.eachWindow(len(starts), func(k, start int) { starts[k] = int32(start) })
	return nil
}

// eachWindow draws n windows and calls f with each one's index k in the
// batch and its start in the view (keepDraws).
func (s *Sampler) eachWindow(n int, f func(k, start int)) {
	starts := uint64(s.view.Len() - s.context) // s in [0, Len-T-1]
	keepDraws(s.shard, n, func() int { return int(s.rng.Uint64N(starts)) }, f)
}

// keepDraws makes n draws of a window and hands each to keep with its
// index k in the batch. Without a shard that is every draw; on a shard of
// size > 1 it draws the windows of every rank, in the order one process
// would, and keeps its own (a draw costs random numbers; only the kept
// windows are visited), so the ranks of a data-parallel run share one
// stream and one sampler state.
func keepDraws[W any](sh shard, n int, draw func() W, keep func(k int, w W)) {
	if sh.size <= 1 {
		for k := range n {
			keep(k, draw())
		}
		return
	}
	if n%sh.rows != 0 {
		panic(fmt.Sprintf("data: Sampler: %d windows on a shard of %d rows per microbatch, want a multiple", n, sh.rows))
	}
	global := sh.rows * sh.size // windows per microbatch of the whole run
	for g := 0; g < n*sh.size; g++ {
		w := draw()
		if mb, row := g/global, g%global; row/sh.rows == sh.rank {
			keep(mb*sh.rows+row%sh.rows, w)
		}
	}
}

// State returns the sampler's position in its random stream, with the view
// length and context it is valid for.
func (s *Sampler) State() ([]byte, error) { return s.AppendState(nil) }

// AppendState appends State to b, so that a caller reusing b does not
// allocate.
func (s *Sampler) AppendState(b []byte) ([]byte, error) {
	b = append(b, samplerStateMagic...)
	b = binary.LittleEndian.AppendUint64(b, uint64(s.view.Len()))
	b = binary.LittleEndian.AppendUint64(b, uint64(s.context))
	b, err := s.pcg.AppendBinary(b)
	if err != nil {
		return nil, fmt.Errorf("sampler state: %w", err)
	}
	return b, nil
}

// SetState restores a position saved by State. The state must come from a
// sampler over a view of the same length with the same context; otherwise
// the windows would silently differ, so SetState fails instead.
func (s *Sampler) SetState(state []byte) error {
	const head = len(samplerStateMagic) + 16
	if len(state) < head || !bytes.Equal(state[:len(samplerStateMagic)], []byte(samplerStateMagic)) {
		return fmt.Errorf("sampler state: %d bytes not starting with %q, want a state from Sampler.State", len(state), samplerStateMagic)
	}
	viewLen := binary.LittleEndian.Uint64(state[8:])
	context := binary.LittleEndian.Uint64(state[16:])
	if viewLen != uint64(s.view.Len()) || context != uint64(s.context) {
		return fmt.Errorf("sampler state: for a view of %d tokens with context %d, want a view of %d tokens with context %d",
			viewLen, context, s.view.Len(), s.context)
	}
	pcg := new(rand.PCG)
	if err := pcg.UnmarshalBinary(state[head:]); err != nil {
		return fmt.Errorf("sampler state: %w", err)
	}
	*s.pcg = *pcg
	return nil
}
