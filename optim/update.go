package optim

import (
	"fmt"

	"github.com/posttrainllm/posttrainllm/mlx"
)

// step is what every update shares: the learning rate in float32, the new
// update counter, and that counter as float32 for bias corrections.
type step struct {
	lr      *mlx.Array // 0-D float32
	counter *mlx.Array // 0-D int32, old counter + 1
	t       *mlx.Array // 0-D float32 copy of counter
}

func newStep(lr, counter *mlx.Array) step {
	next := mlx.AddScalar(counter, 1)
	return step{lr: f32(lr), counter: next, t: mlx.AsType(next, mlx.Float32)}
}

// runUpdate checks Update's arguments, runs body inside a scope so that its
// intermediate arrays are freed on return, and keeps only its outputs.
// body receives the shared step values and fills newParams and newState
// (newState[0], the counter, is already set).
func runUpdate(l *layout, params, grads, state []*mlx.Array, lr *mlx.Array,
	body func(s step, newParams, newState []*mlx.Array)) (newParams, newState []*mlx.Array, err error) {
	if err := l.check(params, grads, state, lr); err != nil {
		return nil, nil, err
	}
	// Scopes live on the MLX thread: inside a step this runs directly, and
	// from elsewhere Do hands the whole update over at once.
	err = mlx.Do(func() (err error) {
		newParams, newState, err = updateInScope(l, params, state, lr, body)
		return err
	})
	return newParams, newState, err
}

// updateInScope is runUpdate's work, on the MLX thread.
func updateInScope(l *layout, params, state []*mlx.Array, lr *mlx.Array,
	body func(s step, newParams, newState []*mlx.Array)) ([]*mlx.Array, []*mlx.Array, error) {
	scope := mlx.NewScope()
	defer scope.Close()
	s := newStep(lr, state[0])
	newParams := make([]*mlx.Array, len(params))
	newState := make([]*mlx.Array, len(state))
	newState[0] = s.counter
	body(s, newParams, newState)
	for i, a := range newParams {
		if err := a.Err(); err != nil {
			return nil, nil, fmt.Errorf("optim: %s: update of %q: %w", l.opt, l.params[i].Name, err)
		}
		if a.Dtype() != params[i].Dtype() {
			return nil, nil, fmt.Errorf("optim: %s: update of %q gave %s for a %s param", l.opt, l.params[i].Name, a, params[i])
		}
	}
	for j, a := range newState {
		if err := a.Err(); err != nil {
			return nil, nil, fmt.Errorf("optim: %s: update of state %q: %w", l.opt, l.names[j], err)
		}
	}
	scope.Keep(newParams...)
	scope.Keep(newState...)
	return newParams, newState, nil
}

// f32 returns a in float32 (a itself when it already is).
func f32(a *mlx.Array) *mlx.Array { return castTo(a, mlx.Float32) }

// castTo returns a in dtype (a itself when it already is).
func castTo(a *mlx.Array, dtype mlx.Dtype) *mlx.Array {
	if a.Valid() && a.Dtype() == dtype {
		return a
	}
	return mlx.AsType(a, dtype)
}

// scalar returns a 0-D float32 constant.
func scalar(v float64) *mlx.Array { return mlx.Scalar(v, mlx.Float32) }

// ema returns beta*avg + (1-beta)*x, the exponential moving average update.
func ema(avg, x *mlx.Array, beta float64) *mlx.Array {
	return mlx.Add(mlx.MulScalar(avg, beta), mlx.MulScalar(x, 1-beta))
}

// emaArr is ema with beta a 0-D array.
func emaArr(avg, x, beta *mlx.Array) *mlx.Array {
	oneMinus := mlx.Subtract(scalar(1), beta)
	return mlx.Add(mlx.Multiply(beta, avg), mlx.Multiply(oneMinus, x))
}

// decayFactor returns 1 - lr*wd as a 0-D array: the decoupled weight-decay
// multiplier of one step.
func decayFactor(lr *mlx.Array, wd float64) *mlx.Array {
	return mlx.Subtract(scalar(1), mlx.MulScalar(lr, wd))
}

// rms returns sqrt(mean(a²)) over all elements, as a 0-D array.
func rms(a *mlx.Array) *mlx.Array { return mlx.Sqrt(mlx.Mean(mlx.Square(a))) }
