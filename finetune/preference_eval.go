package finetune

import (
	"fmt"

	"github.com/posttrainllm/posttrainllm/data"
	"github.com/posttrainllm/posttrainllm/mlx"
	"github.com/posttrainllm/posttrainllm/step"
)

// PreferenceEval is what a preference objective measures over pairs:
// the mean loss and the means of PreferenceAux over Pairs pairs.
type PreferenceEval struct {
	Loss           float64 `json:"loss"`
	RewardChosen   float64 `json:"reward_chosen"`
	RewardRejected float64 `json:"reward_rejected"`
	Margin         float64 `json:"margin"`
	Accuracy       float64 `json:"accuracy"`
	Pairs          int     `json:"pairs"`
}

// aux is the evaluation's PreferenceAux means by name.
func (v PreferenceEval) aux() map[string]float64 {
	vals := []float64{v.RewardChosen, v.RewardRejected, v.Margin, v.Accuracy}
	out := make(map[string]float64, len(vals))
	for i, name := range PreferenceAux {
		out[name] = vals[i]
	}
	return out
}

// PairEvaluator measures a row loss (PreferenceLoss,
// AdapterPreferenceLoss) over the pairs of a set of rows, without
// gradients: the held-out preference accuracy and rewards of a
// preference fine-tune. Its function of (trainable, frozen, x, y, mask,
// row inputs) has fixed shapes, so compiled it traces once. It must be
// used on the MLX thread.
type PairEvaluator struct {
	loss step.Loss
	nT   int // trainable arrays
	nF   int // frozen arrays
	fn   *mlx.Closure
}

// NewPairEvaluator returns an evaluator of loss over nTrainable and
// nFrozen arrays, compiled when compile is set.
func NewPairEvaluator(loss step.Loss, nTrainable, nFrozen int, compile bool) (*PairEvaluator, error) {
	e := &PairEvaluator{loss: loss, nT: nTrainable, nF: nFrozen}
	if compile {
		var err error
		if e.fn, err = mlx.Compile(e.body); err != nil {
			return nil, fmt.Errorf("preference eval: compiling: %w", err)
		}
	}
	return e, nil
}

func (e *PairEvaluator) body(in []*mlx.Array) ([]*mlx.Array, error) {
	n := e.nT + e.nF
	b := in[n:]
	loss, aux := e.loss(in[:e.nT], in[e.nT:n], step.Microbatch{X: b[0], Y: b[1], W: b[2], Rows: b[3:]})
	return append([]*mlx.Array{loss}, aux...), nil
}

// Free releases the compiled function. A nil evaluator is a no-op.
func (e *PairEvaluator) Free() {
	if e != nil {
		e.fn.Free()
	}
}

// Run measures the loss over the pairs of rows (data.BuildPairRows), in
// batches of batch rows (rounded up to whole pairs), with refs the rows'
// reference log-probabilities where the loss takes them (nil otherwise).
// The last batch is filled with copies of the first pair at weight 0, so
// that every position holds a real answer and nothing but weights
// removes them.
func (e *PairEvaluator) Run(trainable, frozen []*mlx.Array, rows *data.Rows, refs []float32, batch int) (PreferenceEval, error) {
	if !rows.Pairs {
		return PreferenceEval{}, fmt.Errorf("preference eval: rows are not preference pairs")
	}
	if refs != nil && len(refs) != rows.Len() {
		return PreferenceEval{}, fmt.Errorf("preference eval: %d reference values for %d rows", len(refs), rows.Len())
	}
	batch += batch % 2
	T := rows.T
	x, y, mask := make([]int32, batch*T), make([]int32, batch*T), make([]float32, batch*T)
	w, ref := make([]float32, batch), make([]float32, batch)
	sums := make([]float64, 1+len(PreferenceAux))
	for lo := 0; lo < rows.Len(); lo += batch {
		for k := 0; k < batch; k++ {
			r, weight := lo+k, float32(1-k%2) // the pair's weight on its chosen row
			if r >= rows.Len() {
				r, weight = k%2, 0
			}
			copy(x[k*T:(k+1)*T], rows.X[r*T:(r+1)*T])
			copy(y[k*T:(k+1)*T], rows.Y[r*T:(r+1)*T])
			copy(mask[k*T:(k+1)*T], rows.W[r*T:(r+1)*T])
			w[k] = weight
			if refs != nil {
				ref[k] = refs[r]
			}
		}
		if err := e.batch(trainable, frozen, x, y, mask, w, ref, refs != nil, batch, T, sums); err != nil {
			return PreferenceEval{}, fmt.Errorf("preference eval: rows %d to %d: %w", lo, min(lo+batch, rows.Len())-1, err)
		}
	}
	pairs := rows.Len() / 2
	for i := range sums {
		sums[i] /= float64(pairs)
	}
	return PreferenceEval{Loss: sums[0], RewardChosen: sums[1], RewardRejected: sums[2], Margin: sums[3], Accuracy: sums[4], Pairs: pairs}, nil
}

// batch evaluates one batch and adds its sums to sums.
func (e *PairEvaluator) batch(trainable, frozen []*mlx.Array, x, y []int32, mask, w, ref []float32, withRef bool, B, T int, sums []float64) error {
	sc := mlx.NewScope()
	defer sc.Close()
	in := append(append([]*mlx.Array{}, trainable...), frozen...)
	in = append(in, mlx.FromSlice(x, B, T), mlx.FromSlice(y, B, T), mlx.FromSlice(mask, B, T), mlx.FromSlice(w, B))
	if withRef {
		in = append(in, mlx.FromSlice(ref, B))
	}
	var out []*mlx.Array
	var err error
	if e.fn != nil {
		out, err = e.fn.Call(in...)
	} else {
		out, err = e.body(in)
	}
	if err != nil {
		return err
	}
	if len(out) != len(sums) {
		return fmt.Errorf("the loss returned %d values, want %d", len(out), len(sums))
	}
	for i, a := range out {
		v, err := a.Item()
		if err != nil {
			return err
		}
		sums[i] += v
	}
	return nil
}
