package model

import (
	"fmt"

	"github.com/posttrainllm/posttrainllm/mlx"
)

// LossTermsAt is LossTermsWith at chosen positions only: at [B, C]
// (int32) holds, for each row of x, the C columns whose terms are wanted,
// and ce and lse come back [B, C], ce[b, j] the cross-entropy of target
// y[b, at[b, j]]. The blocks run over every position (each attends to
// all that precede it), but the output projection, the float32 upcast,
// the logsumexp and the target's logit run over the B·C chosen rows of
// the final norm's output only, forward and backward. An objective whose
// loss reads a known span of each row (a completion after its prompt)
// pays for the [·, V] head on that span alone: the head is the largest
// single product of a small model, and its float32 logits the largest
// arrays of the step. lin may be nil (no Linears of their own).
func (m *Transformer) LossTermsAt(params []*mlx.Array, lin Linears, x, y, at *mlx.Array) (ce, lse *mlx.Array) {
	fail := func(err error) (*mlx.Array, *mlx.Array) { return mlx.ErrorArray(err), mlx.ErrorArray(err) }
	if err := checkTargets(x, y); err != nil {
		return fail(err)
	}
	if err := at.Err(); err != nil {
		return fail(err)
	}
	if x.Err() == nil && (at.Ndim() != 2 || at.Dim(0) != x.Dim(0) || at.Dtype().IsFloat()) {
		return fail(fmt.Errorf("model: positions of shape %v (%v) for tokens %v: want [batch, positions] integers", at.Shape(), at.Dtype(), x.Shape()))
	}
	f := m.formulation()
	if lin != nil {
		if err := m.setLinears(&f, lin); err != nil {
			return fail(err)
		}
	}
	B, T, C := x.Dim(0), x.Dim(1), at.Dim(1)
	// Row b's column j is row b·T + j of the flattened [B·T, D] stream.
	rowStart := mlx.MulScalar(mlx.Reshape(mlx.Arange(0, float64(B), 1, mlx.Int32), B, 1), float64(T))
	pick := mlx.Reshape(mlx.Add(mlx.AsType(at, mlx.Int32), mlx.AsType(rowStart, mlx.Int32)), B*C)
	yAt := mlx.Take(mlx.Reshape(y, B*T), pick, 0)
	out := m.forwardTo(params, x, nil, f, func(m *Transformer, f formulation, h, head *mlx.Array) []*mlx.Array {
		ce, lse := m.headTerms(f, mlx.Take(h, pick, 0), head, yAt)
		return []*mlx.Array{ce, lse}
	})
	if err := out[0].Err(); err != nil {
		return fail(err)
	}
	return mlx.Reshape(out[0], B, C), mlx.Reshape(out[1], B, C)
}

// headTerms returns the cross-entropy and logsumexp, [R] float32 each, of
// final-norm rows h [R, D] against targets y [R] through the output
// projection head: chunk by chunk under Memory.LossChunk (chunkedLoss),
// else from the whole float32 logits.
func (m *Transformer) headTerms(f formulation, h, head, y *mlx.Array) (ce, lse *mlx.Array) {
	if m.Memory.LossChunk > 0 {
		c := chunkedLoss{chunk: m.Memory.LossChunk, vocab: m.Config.VocabSize, pv: m.Config.PaddedVocab(),
			trainedHead: len(f.linears) == 0}
		if l, ok := f.headLinear(head); ok {
			c.linear = &l
		}
		return c.terms(h, head, y)
	}
	return logitTerms(mlx.AsType(logitsHead(m, f, h, head)[0], mlx.Float32), y)
}

// logitTerms are the cross-entropy and logsumexp of float32 logits
// [R, V] against targets y [R].
func logitTerms(logits, y *mlx.Array) (ce, lse *mlx.Array) {
	lse = mlx.LogSumExp(logits, -1)
	target := mlx.Squeeze(mlx.TakeAlongAxis(logits, mlx.ExpandDims(y, -1), -1), -1)
	return mlx.Subtract(lse, target), lse
}
