package pretrain

import (
	"fmt"

	"github.com/posttrainllm/posttrainllm/mlx"
	"github.com/posttrainllm/posttrainllm/model"
	"github.com/posttrainllm/posttrainllm/optim"
	"github.com/posttrainllm/posttrainllm/step"
)

// GaLoreRefresher recomputes GaLore's projections every UpdateGap updates,
// outside the compiled step: from the gradient of one microbatch of the
// batch about to be trained on, by SVD on the CPU (MLX has no GPU SVD).
// The projections are optimizer state, inputs of the step, so the step
// does not trace again. Its cost is one forward and backward pass and one
// SVD per hidden matrix every UpdateGap updates.
type GaLoreRefresher struct {
	opt  *optim.GaLore
	grad *mlx.ValueAndGradFunc
	n    int // parameters
}

// NewGaLoreRefresher returns the refresher for opt over m's loss, or nil
// when opt is not GaLore.
func NewGaLoreRefresher(opt optim.Optimizer, m *model.Transformer) (*GaLoreRefresher, error) {
	g, ok := opt.(*optim.GaLore)
	if !ok {
		return nil, nil
	}
	n := len(m.Specs)
	argnums := make([]int, n)
	for i := range argnums {
		argnums[i] = i
	}
	grad, err := mlx.ValueAndGrad(func(in []*mlx.Array) ([]*mlx.Array, error) {
		return []*mlx.Array{m.Loss(in[:n], in[n], in[n+1])}, nil
	}, argnums...)
	if err != nil {
		return nil, fmt.Errorf("galore refresh: %w", err)
	}
	return &GaLoreRefresher{opt: g, grad: grad, n: n}, nil
}

// Due reports whether the update after step completed updates refreshes
// the projections: the first one, and every UpdateGap-th after it.
func (r *GaLoreRefresher) Due(step int) bool {
	return r != nil && step%r.opt.Config().UpdateGap == 0
}

// Refresh replaces the projections in s with those of the gradient of the
// first microbatch of b.
func (r *GaLoreRefresher) Refresh(s *step.State, b step.Batch) error {
	err := s.RefreshOptState(func(params, opt []*mlx.Array) ([]*mlx.Array, error) {
		scope := mlx.NewScope()
		defer scope.Close()
		bt := b.B * b.T
		x := mlx.FromSlice(b.X[:bt], b.B, b.T)
		y := mlx.FromSlice(b.Y[:bt], b.B, b.T)
		in := append(append([]*mlx.Array(nil), params...), x, y)
		_, grads, err := r.grad.Call(in...)
		if err != nil {
			return nil, fmt.Errorf("galore refresh: gradient: %w", err)
		}
		fresh, err := r.opt.Refresh(grads, opt)
		if err != nil {
			return nil, err
		}
		old := r.opt.Replaced(opt, fresh)
		scope.Keep(r.opt.Replaced(fresh, opt)...) // the new projections
		mlx.Free(old...)
		return fresh, nil
	})
	if err != nil {
		return fmt.Errorf("galore refresh: %w", err)
	}
	return nil
}

// Free releases the gradient function.
func (r *GaLoreRefresher) Free() {
	if r != nil {
		r.grad.Free()
	}
}
