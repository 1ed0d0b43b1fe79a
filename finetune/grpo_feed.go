package finetune

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
)

// promptFeed is the order a GRPO run draws its prompts in: seeded
// epochs, each a fresh permutation of the prompts, taken in runs of
// ranks × perRank prompts per update, rank r taking the r-th run of
// perRank; an update that reaches an epoch's end continues into the
// next epoch. Its state (epoch, position and the rollouts drawn) is what
// a checkpoint records, so a resumed run draws what the first would
// have.
type promptFeed struct {
	n, perRank, rank, ranks int
	seed                    uint64
	order                   []int
	st                      feedState
}

// feedState is a promptFeed's position, as checkpoints hold it.
type feedState struct {
	Epoch    int `json:"epoch"`
	Next     int `json:"next"`     // position in the epoch's permutation
	Rollouts int `json:"rollouts"` // batches of completions drawn so far
}

// newPromptFeed returns the feed of n prompts, perRank per update for
// rank of ranks, seeded by seed, after state (nil: from the start).
func newPromptFeed(n, perRank, rank, ranks int, seed uint64, state []byte) (*promptFeed, error) {
	if n < 1 || perRank < 1 {
		return nil, fmt.Errorf("grpo: %d prompts, %d per update: want at least 1 of each", n, perRank)
	}
	f := &promptFeed{n: n, perRank: perRank, rank: rank, ranks: ranks, seed: seed}
	if state != nil {
		if err := json.Unmarshal(state, &f.st); err != nil {
			return nil, fmt.Errorf("grpo: prompt order %q: %w", state, err)
		}
		if f.st.Epoch < 0 || f.st.Next < 0 || f.st.Next > n || f.st.Rollouts < 0 {
			return nil, fmt.Errorf("grpo: prompt order at epoch %d, prompt %d, want a position within %d prompts", f.st.Epoch, f.st.Next, n)
		}
	}
	f.shuffle()
	return f, nil
}

// shuffle draws the current epoch's permutation.
func (f *promptFeed) shuffle() {
	r := rand.New(rand.NewPCG(f.seed, uint64(f.st.Epoch)))
	f.order = r.Perm(f.n)
}

// next returns this rank's prompt indices for the next update and
// advances past every rank's.
func (f *promptFeed) next() []int {
	var all []int
	for len(all) < f.perRank*f.ranks {
		if f.st.Next == f.n {
			f.st.Epoch++
			f.st.Next = 0
			f.shuffle()
		}
		all = append(all, f.order[f.st.Next])
		f.st.Next++
	}
	f.st.Rollouts++
	return all[f.rank*f.perRank : (f.rank+1)*f.perRank]
}

// rewind puts the feed back at st, a position it was at before (an
// update whose rollouts failed is drawn again on resume), redrawing the
// epoch's permutation.
func (f *promptFeed) rewind(st feedState) {
	if st.Epoch != f.st.Epoch {
		f.st = st
		f.shuffle()
		return
	}
	f.st = st
}

// appendState appends the feed's position to b.
func (f *promptFeed) appendState(b []byte) []byte {
	js, _ := json.Marshal(f.st) // a struct of ints always marshals
	return append(b, js...)
}
