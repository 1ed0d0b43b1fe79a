package pretrain

import (
	"fmt"
	"math"

	"github.com/posttrainllm/posttrainllm/data"
	"github.com/posttrainllm/posttrainllm/mlx"
	"github.com/posttrainllm/posttrainllm/train"
)

// Evaluator measures the held-out loss during training on a fixed sample
// of the validation tokens: windows drawn at random starts by a sampler
// with a fixed seed, the same windows every time, so successive values
// compare. It has its own compiled function, traced once.
type Evaluator struct {
	view                    data.View
	batch, context, batches int
	seed                    uint64
	fn                      *train.EvalFunc
}

// NewEvaluator prepares evaluations over at least tokens tokens of view:
// ceil(tokens / (batch·context)) batches of batch windows of context
// tokens, drawn by a data.Sampler seeded with seed. terms gives the
// per-position losses; compile traces them into one MLX function.
func NewEvaluator(terms train.TokenLossFunc, view data.View, batch, context, tokens int, seed uint64, compile bool) (*Evaluator, error) {
	if batch < 1 || context < 1 || tokens < 1 {
		return nil, fmt.Errorf("eval: batch %d, context %d, tokens %d; want each >= 1", batch, context, tokens)
	}
	if _, err := data.NewSampler(view, context, seed); err != nil {
		return nil, fmt.Errorf("validation data: %w", err)
	}
	e := &Evaluator{view: view, batch: batch, context: context, batches: (tokens-1)/(batch*context) + 1,
		seed: seed}
	err := mlx.Do(func() (err error) {
		e.fn, err = train.NewEvalFunc(terms, compile)
		return err
	})
	if err != nil {
		return nil, err
	}
	return e, nil
}

// Tokens is the number of tokens each evaluation covers:
// batches × batch × context.
func (e *Evaluator) Tokens() int { return e.batches * e.batch * e.context }

// Evaluate returns the mean loss terms of params over the evaluator's
// windows. It runs on the MLX thread, on its default device.
func (e *Evaluator) Evaluate(params []*mlx.Array) (train.EvalResult, error) {
	// The parameters may still be computing on the caller's stream; the
	// evaluation reads them finished.
	if err := mlx.Eval(params...); err != nil {
		return train.EvalResult{}, fmt.Errorf("eval: %w", err)
	}
	s, err := data.NewSampler(e.view, e.context, e.seed)
	if err != nil {
		return train.EvalResult{}, fmt.Errorf("validation data: %w", err)
	}
	var res train.EvalResult
	err = mlx.Do(func() error {
		sc := mlx.NewScope()
		defer sc.Close()
		res, err = e.fn.Run(params, e.batch, e.context, e.batches, func(_ int, x, y []int32, mask []float32) int {
			s.Fill(x, y)
			for i := range mask {
				mask[i] = 1
			}
			return len(mask)
		})
		return err
	})
	return res, err
}

// record evaluates params and writes the held-out figures into m:
// val_loss (the cross-entropy), val_tokens and, when the model has z-loss
// (zLoss > 0), val_z_loss, the term zLoss × mean(logsumexp²) that
// training adds. It returns the cross-entropy.
func (e *Evaluator) record(params []*mlx.Array, zLoss float64, m *train.Metrics) (float64, error) {
	r, err := e.Evaluate(params)
	if err != nil {
		return math.NaN(), err
	}
	ce := r.Loss
	m.ValLoss, m.ValTokens = &ce, r.Tokens
	if zLoss > 0 {
		z := zLoss * r.LSESquared
		m.ValZLoss = &z
	}
	return ce, nil
}

// Free releases the compiled function. A nil Evaluator is a no-op, so a
// run that failed before making one can free what it holds.
func (e *Evaluator) Free() {
	if e != nil && e.fn != nil {
		_ = mlx.Do(func() error { e.fn.Free(); return nil })
	}
}
