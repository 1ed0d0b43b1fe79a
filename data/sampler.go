package data

import (
	"bytes"
	"encoding/binary"
	"fmt"
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
	if s.shard.size > 1 {
		s.fillShard(x, y)
		return
	}
	starts := uint64(s.view.Len() - t) // s in [0, Len-T-1]
	for off := 0; off < len(x); off += t {
		start := int(s.rng.Uint64N(starts))
		s.view.CopyInto(x[off:off+t], start)
		s.view.CopyInto(y[off:off+t], start+1)
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
