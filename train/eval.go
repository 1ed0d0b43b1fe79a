package train

import (
	"fmt"

	"github.com/posttrainllm/posttrainllm/data"
	"github.com/posttrainllm/posttrainllm/mlx"
)

// Evaluator measures the held-out loss on a fixed set of validation
// batches: the same windows every time, so successive values compare.
// It has its own compiled function (params, x[B,T], y[B,T]) → loss.
type Evaluator struct {
	x, y     []*mlx.Array
	fn       *mlx.Closure
	loss     LossFunc
	compiled bool
}

// NewEvaluator draws batches batches of batch × context tokens from view
// with a sampler seeded by seed.
func NewEvaluator(loss LossFunc, view data.View, batch, context, batches int, seed uint64, compile bool) (*Evaluator, error) {
	s, err := data.NewSampler(view, context, seed)
	if err != nil {
		return nil, fmt.Errorf("validation data: %w", err)
	}
	if batch < 1 || batches < 1 {
		return nil, fmt.Errorf("validation data: %d batches of %d sequences, want >= 1 of >= 1", batches, batch)
	}
	e := &Evaluator{loss: loss, compiled: compile}
	xs := make([]int32, batch*context)
	ys := make([]int32, batch*context)
	err = mlx.Do(func() error {
		for i := 0; i < batches; i++ {
			s.Fill(xs, ys)
			e.x = append(e.x, mlx.FromSlice(xs, batch, context))
			e.y = append(e.y, mlx.FromSlice(ys, batch, context))
		}
		if compile {
			var err error
			if e.fn, err = mlx.Compile(e.body); err != nil {
				return fmt.Errorf("eval: compiling: %w", err)
			}
		}
		return nil
	})
	if err != nil {
		e.Free()
		return nil, err
	}
	return e, nil
}

func (e *Evaluator) body(in []*mlx.Array) ([]*mlx.Array, error) {
	n := len(in) - 2
	return []*mlx.Array{e.loss(in[:n], in[n], in[n+1])}, nil
}

// Loss returns the mean loss of params over the validation batches.
func (e *Evaluator) Loss(params []*mlx.Array) (float64, error) {
	var loss float64
	err := mlx.Do(func() error {
		var err error
		loss, err = e.meanLoss(params)
		return err
	})
	return loss, err
}

// meanLoss is Loss on the MLX thread.
func (e *Evaluator) meanLoss(params []*mlx.Array) (float64, error) {
	s := mlx.NewScope()
	defer s.Close()
	var total float64
	for i := range e.x {
		in := append(append([]*mlx.Array{}, params...), e.x[i], e.y[i])
		var out []*mlx.Array
		var err error
		if e.fn != nil {
			out, err = e.fn.Call(in...)
		} else {
			out, err = e.body(in)
		}
		if err != nil {
			return 0, fmt.Errorf("eval: %w", err)
		}
		v, err := out[0].Item()
		if err != nil {
			return 0, fmt.Errorf("eval: %w", err)
		}
		total += v
	}
	return total / float64(len(e.x)), nil
}

// Free releases the validation batches and the compiled function. A nil
// evaluator is a no-op.
func (e *Evaluator) Free() {
	if e == nil {
		return
	}
	mlx.Do(func() error {
		mlx.Free(e.x...)
		mlx.Free(e.y...)
		e.fn.Free()
		return nil
	})
}
