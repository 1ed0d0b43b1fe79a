package step

import (
	"errors"
	"fmt"

	"github.com/posttrainllm/posttrainllm/mlx"
)

// lossInterval sums, on the device, each update's loss times the tokens it
// averaged since the last IntervalLoss, so a loop can log the mean over a
// whole log interval without reading a value back at every update.
type lossInterval struct {
	sum     *mlx.Array   // Σ loss × weight, float32; nil before the first update
	aux     []*mlx.Array // Σ aux × weight of a row step's auxiliary sums
	weight  float64      // Σ weight
	updates int
}

// add records an update's loss and auxiliary sums (borrowed) over weight
// counted tokens (rows, for a row step).
func (l *lossInterval) add(loss *mlx.Array, aux []*mlx.Array, weight float64) {
	l.sum = accumulate(l.sum, loss, weight)
	if l.aux == nil && len(aux) > 0 {
		l.aux = make([]*mlx.Array, len(aux))
	}
	for i, a := range aux {
		l.aux[i] = accumulate(l.aux[i], a, weight)
	}
	l.weight += weight
	l.updates++
}

// accumulate returns sum + a·weight (a·weight for a nil sum), freeing the
// old sum.
func accumulate(sum, a *mlx.Array, weight float64) *mlx.Array {
	term := mlx.MulScalar(a, weight)
	if sum == nil {
		return term
	}
	out := mlx.Add(sum, term)
	mlx.Free(sum, term)
	return out
}

// arrays lists the running sums (none before the first update).
func (l *lossInterval) arrays() []*mlx.Array {
	if l.sum == nil {
		return nil
	}
	return append([]*mlx.Array{l.sum}, l.aux...)
}

// free releases the running sums.
func (l *lossInterval) free() {
	mlx.Free(l.arrays()...)
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
			return errors.New("step: interval loss of a freed state")
		case s.interval.updates == 0:
			return errors.New("step: interval loss with no update since the last")
		}
		sum, e := s.interval.sum.Item()
		if e != nil {
			return fmt.Errorf("step: update: %w", e)
		}
		tokens, updates = s.interval.weight, s.interval.updates
		aux := make([]float64, len(s.interval.aux))
		for i, a := range s.interval.aux {
			v, e := a.Item()
			if e != nil {
				return fmt.Errorf("step: update: %w", e)
			}
			if tokens > 0 {
				aux[i] = v / tokens
			}
		}
		if tokens > 0 {
			mean = sum / tokens
		}
		s.interval.free()
		s.intervalAux = aux
		return nil
	})
	return mean, tokens, updates, err
}

// IntervalAux returns the means of the step's auxiliary sums (Layout.Aux)
// over the interval the last IntervalLoss call closed, weighted as its
// loss mean is; nil before that call and for other steps.
func (s *State) IntervalAux() []float64 {
	if len(s.intervalAux) == 0 {
		return nil
	}
	return append([]float64(nil), s.intervalAux...)
}

// updateTokens is the weight of b's loss in an interval's mean: the
// loss-weight total of a weighted step (the row-weight total of a row
// step: its pairs), else every target of the batch.
func updateTokens(b Batch, weighted bool, total float64) float64 {
	if weighted {
		return total
	}
	return float64(b.N * b.B * b.T)
}
