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
	norm = globalNorm(grads)
	scope.Keep(norm)
	clipped = make([]*mlx.Array, len(grads))
	if maxNorm <= 0 {
		copy(clipped, grads)
		return clipped, norm
	}
	scale := ClipScale(norm, maxNorm)
	for i, g := range grads {
		clipped[i] = castTo(mlx.Multiply(f32(g), scale), g.Dtype())
	}
	scope.Keep(clipped...)
	return clipped, norm
}

// GlobalNorm returns the L2 norm of all of grads together as a 0-D
// float32 array, computed in float32. The caller owns it.
func GlobalNorm(grads []*mlx.Array) *mlx.Array {
	var norm *mlx.Array
	_ = mlx.Do(func() error {
		scope := mlx.NewScope()
		defer scope.Close()
		norm = globalNorm(grads)
		scope.Keep(norm)
		return nil
	})
	return norm
}

// fewArrays is how many gradients globalNorm reduces one by one.
const fewArrays = 4

// globalNorm is GlobalNorm's work, on the MLX thread inside a scope.
//
// Many arrays are flattened and concatenated into one reduction, rather
// than a square and a sum per gradient: on a GPU each is a kernel launch,
// and the concatenation costs one copy per gradient. A few (up to
// fewArrays: a flat layout's groups, Flat) are reduced one by one and
// summed, which copies nothing.
func globalNorm(grads []*mlx.Array) *mlx.Array {
	if len(grads) == 0 {
		return mlx.Sqrt(scalar(0))
	}
	if len(grads) <= fewArrays {
		sum := mlx.Sum(mlx.Square(f32(grads[0])))
		for _, g := range grads[1:] {
			sum = mlx.Add(sum, mlx.Sum(mlx.Square(f32(g))))
		}
		return mlx.Sqrt(sum)
	}
	flat := make([]*mlx.Array, len(grads))
	for i, g := range grads {
		flat[i] = mlx.Reshape(f32(g), -1)
	}
	return mlx.Sqrt(mlx.Sum(mlx.Square(mlx.Concatenate(flat, 0))))
}

// ClipScale returns min(1, maxNorm/(norm + 1e-6)) for a 0-D norm: the
// factor that scales gradients of that global norm to at most maxNorm.
func ClipScale(norm *mlx.Array, maxNorm float64) *mlx.Array {
	return mlx.Minimum(scalar(1), mlx.Divide(scalar(maxNorm), mlx.AddScalar(norm, 1e-6)))
}
