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
	scope := mlx.NewScope()
	defer scope.Close()
	sumSq := scalar(0)
	for _, g := range grads {
		sumSq = mlx.Add(sumSq, mlx.Sum(mlx.Square(f32(g))))
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
