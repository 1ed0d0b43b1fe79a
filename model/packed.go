package model

import (
	"fmt"
	"slices"

	"github.com/posttrainllm/posttrainllm/mlx"
)

// PackedLossTerms is LossTermsWith for rows that pack several examples:
// seg [B, T] (int32) numbers the example each input position belongs to,
// nondecreasing along each row. A position attends only to the earlier
// positions of its own example (a block-diagonal causal mask), and learned
// absolute positions restart at 0 with each example, so every example's
// terms are those it has run alone. Rotary positions need no restart: the
// attention scores of rotated queries and keys depend only on their
// distance, which the mask keeps within one example. A nil seg is
// LossTermsWith.
func (m *Transformer) PackedLossTerms(params []*mlx.Array, lin Linears, x, y, seg *mlx.Array) (ce, lse *mlx.Array) {
	if seg == nil {
		return m.LossTermsWith(params, lin, x, y)
	}
	fail := func(err error) (*mlx.Array, *mlx.Array) { return mlx.ErrorArray(err), mlx.ErrorArray(err) }
	if err := checkTargets(x, y); err != nil {
		return fail(err)
	}
	if err := seg.Err(); err != nil {
		return fail(err)
	}
	if x.Err() == nil && (!slices.Equal(seg.Shape(), x.Shape()) || seg.Dtype() != mlx.Int32) {
		return fail(fmt.Errorf("model: segments are %v of shape %v, want int32 of the tokens' shape %v", seg.Dtype(), seg.Shape(), x.Shape()))
	}
	f := m.formulation()
	if err := m.setLinears(&f, lin); err != nil {
		return fail(err)
	}
	f.seg = seg
	f.fusedLoss = false
	ce, lse = m.rowTerms(params, x, y, f)
	if err := ce.Err(); err != nil {
		return ce, mlx.ErrorArray(err)
	}
	B, T := x.Dim(0), x.Dim(1)
	return mlx.Reshape(ce, B, T), mlx.Reshape(lse, B, T)
}

// documentMask is the block-diagonal causal mask of segments seg [B, T]:
// [B, 1, T, T] booleans, true where query i may attend to key j (j ≤ i
// and both in one example).
func documentMask(seg *mlx.Array) *mlx.Array {
	T := seg.Dim(1)
	idx := mlx.Arange(0, float64(T), 1, mlx.Int32)
	causal := mlx.GreaterEqual(mlx.ExpandDims(idx, 1), mlx.ExpandDims(idx, 0)) // [T, T]
	same := mlx.Equal(mlx.ExpandDims(seg, 2), mlx.ExpandDims(seg, 1))          // [B, T, T]
	return mlx.ExpandDims(mlx.LogicalAnd(same, causal), 1)                     // [B, 1, T, T]
}

// documentPositions is each position's index within its example for
// segments seg [B, T] nondecreasing along rows: [B·T] int32, i minus the
// number of positions of the row in earlier examples.
func documentPositions(seg *mlx.Array) *mlx.Array {
	B, T := seg.Dim(0), seg.Dim(1)
	idx := mlx.Arange(0, float64(T), 1, mlx.Int32)
	before := mlx.Sum(mlx.AsType(mlx.Less(mlx.ExpandDims(seg, 1), mlx.ExpandDims(seg, 2)), mlx.Int32), 2) // [B, T]
	return mlx.Reshape(mlx.Subtract(idx, before), B*T)
}
