package step

import (
	"github.com/posttrainllm/posttrainllm/mlx"
)

// GroupSum sums a over every rank of g: the hook for any quantity that must
// be global across a data-parallel run rather than per rank, such as a
// token count that normalises a loss. With a nil or size-1 group it returns
// a itself. Inside the traced step it becomes part of the compiled
// function.
func GroupSum(g *mlx.Group, a *mlx.Array) *mlx.Array { return mlx.AllSum(a, g) }

// reduceAcrossRanks returns the mean (mean true) or the sum over g's ranks
// of each rank's gradients and scalars (the loss, and a row step's
// auxiliary sums), with one collective: the float32 gradients and the
// scalars are flattened into one buffer, summed across
// ranks, scaled by 1/size when averaging and split back into their shapes.
// A plain step averages; a weighted step sums, since its weights are
// already normalised by the update's token count (Batch.WeightSum, which a
// data-parallel run makes global), so the sum is the global mean. One large
// all-reduce keeps the per-collective latency (a ring round trip, an NCCL
// launch) to one per step, whatever the number of parameters. A nil or
// size-1 group returns the inputs unchanged, so the traced graph is that of
// a single process.
func reduceAcrossRanks(g *mlx.Group, grads, scalars []*mlx.Array, mean bool) ([]*mlx.Array, []*mlx.Array) {
	if g.Size() == 1 {
		return grads, scalars
	}
	flat := make([]*mlx.Array, 0, len(grads)+len(scalars))
	sizes := make([]int, 0, len(grads)+len(scalars))
	for _, gr := range grads {
		flat = append(flat, mlx.Reshape(gr, -1))
		sizes = append(sizes, gr.Size())
	}
	for _, a := range scalars {
		flat = append(flat, mlx.Reshape(mlx.AsType(a, mlx.Float32), 1))
		sizes = append(sizes, 1)
	}
	sum := mlx.AllSum(mlx.Concatenate(flat, 0), g)
	if mean {
		sum = mlx.MulScalar(sum, 1/float64(g.Size()))
	}
	indices := make([]int, len(sizes)-1) // where each part but the first starts
	at := 0
	for i, n := range sizes[:len(sizes)-1] {
		at += n
		indices[i] = at
	}
	parts := mlx.SplitAt(sum, indices, 0)
	out := make([]*mlx.Array, len(grads))
	for i, gr := range grads {
		out[i] = mlx.Reshape(parts[i], gr.Shape()...)
	}
	sc := make([]*mlx.Array, len(scalars))
	for i, a := range scalars {
		sc[i] = mlx.AsType(mlx.Reshape(parts[len(grads)+i], a.Shape()...), a.Dtype())
	}
	return out, sc
}
