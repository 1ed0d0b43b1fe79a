package optim

import "github.com/posttrainllm/posttrainllm/mlx"

// ClipByGlobalNorm returns the gradients scaled so that their global L2 norm
// (over all arrays together) is at most maxNorm, and that norm before
// clipping as a 0-D float32 array. It runs in the graph: the norm is computed
// in float32, the scale is min(1, maxNorm/(norm + 1e-6)), and each clipped
// gradient keeps its dtype. With maxNorm <= 0 the gradients are returned
// unchanged (the same arrays) and only the norm is computed. Arrays it
// creates and does not return are freed before it returns.
func ClipByGlobalNorm(grads []*mlx.Array, maxNorm float64) (clipped []*mlx.Array, norm *mlx.Array) {
	// Scopes live on the MLX thread: inside a step this runs directly, and
	// from elsewhere Do hands the whole computation over at once.
	_ = mlx.Do(func() error {
		clipped, norm = clipInScope(grads, maxNorm)
		return nil
	})
	return clipped, norm
}

// clipInScope is ClipByGlobalNorm's work, on the MLX thread.
func clipInScope(grads []*mlx.Array, maxNorm float64) (clipped []*mlx.Array, norm *mlx.Array) {
	scope := mlx.NewScope()
	defer scope.Close()
	// One reduction over all gradients, flattened and concatenated, rather
	// than a square and a sum per gradient: on a GPU each is a kernel
	// launch, and the concatenation costs one copy per gradient.
	flat := make([]*mlx.Array, len(grads))
	for i, g := range grads {
		flat[i] = mlx.Reshape(f32(g), -1)
	}
	sumSq := scalar(0)
	if len(flat) > 0 {
		sumSq = mlx.Sum(mlx.Square(mlx.Concatenate(flat, 0)))
	}
	norm = mlx.Sqrt(sumSq)
	scope.Keep(norm)
	clipped = make([]*mlx.Array, len(grads))
	if maxNorm <= 0 {
		copy(clipped, grads)
		return clipped, norm
	}
	scale := mlx.Minimum(scalar(1), mlx.Divide(scalar(maxNorm), mlx.AddScalar(norm, 1e-6)))
	for i, g := range grads {
		clipped[i] = castTo(mlx.Multiply(f32(g), scale), g.Dtype())
	}
	scope.Keep(clipped...)
	return clipped, norm
}
