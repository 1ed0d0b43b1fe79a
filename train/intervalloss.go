package train

import (
	"errors"
	"fmt"

	"github.com/posttrainllm/posttrainllm/mlx"
)

// lossInterval sums, on the device, each update's loss times the tokens it
// averaged since the last IntervalLoss, so a loop can log the mean over a
// whole log interval without reading a value back at every update.
type lossInterval struct {
	sum     *mlx.Array // Σ loss × weight, float32; nil before the first update
	weight  float64    // Σ weight
	updates int
}

// add records an update's loss (borrowed) over weight counted tokens.
func (l *lossInterval) add(loss *mlx.Array, weight float64) {
	term := mlx.MulScalar(loss, weight)
	if l.sum == nil {
		l.sum = term
	} else {
		old := l.sum
		l.sum = mlx.Add(old, term)
		mlx.Free(old, term)
	}
	l.weight += weight
	l.updates++
}

// free releases the running sum.
func (l *lossInterval) free() {
	mlx.Free(l.sum)
	*l = lossInterval{}
}

// IntervalLoss is the token-weighted mean loss of the updates since the
// last call (or since the state was made): Σ loss·tokens / Σ tokens, each
// update weighted by the tokens its loss averages (N·B·T for an unweighted
// step, the loss-weight total for a weighted one; an update that counts no
// token adds nothing). It returns that mean, the token total and the
// number of updates, and starts a new interval. It waits for the last
// update; with no update since the last call it returns an error.
func (s *State) IntervalLoss() (mean, tokens float64, updates int, err error) {
	err = mlx.Do(func() error {
		switch {
		case s.freed:
			return errors.New("train: interval loss of a freed state")
		case s.interval.updates == 0:
			return errors.New("train: interval loss with no update since the last")
		}
		sum, e := s.interval.sum.Item()
		if e != nil {
			return fmt.Errorf("train: update: %w", e)
		}
		tokens, updates = s.interval.weight, s.interval.updates
		if tokens > 0 {
			mean = sum / tokens
		}
		s.interval.free()
		return nil
	})
	return mean, tokens, updates, err
}

// updateTokens is the weight of b's loss in an interval's mean: the
// loss-weight total of a weighted step, else every target of the batch.
func updateTokens(b Batch, weighted bool, total float64) float64 {
	if weighted {
		return total
	}
	return float64(b.N * b.B * b.T)
}
