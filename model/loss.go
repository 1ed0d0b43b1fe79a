package model

import (
	"fmt"
	"slices"

	"github.com/posttrainllm/posttrainllm/mlx"
)

// Loss is the mean next-token cross-entropy of logits(x) against targets y
// (both [B, T] int32), computed in float32, plus ZLoss·mean(logsumexp²):
// the mean of TokenLosses plus ZLoss times the mean square of LossTerms'
// logsumexp. It is the training objective.
//
// How it is written depends on the device (formulationFor). On a GPU
// without z-loss it uses MLX's fused cross-entropy kernel, which reads the
// compute-dtype logits and works in float32 inside: no float32 copy of the
// [B, T, V] logits, and three kernels fewer per microbatch.
func (m *Transformer) Loss(params []*mlx.Array, x, y *mlx.Array) *mlx.Array {
	var out *mlx.Array
	mlx.Do(func() error {
		out = m.loss(params, x, y, m.formulation())
		return nil
	})
	return out
}

// loss is Loss written in formulation f.
func (m *Transformer) loss(params []*mlx.Array, x, y *mlx.Array, f formulation) *mlx.Array {
	if err := checkTargets(x, y); err != nil {
		return mlx.ErrorArray(err)
	}
	if f.fusedLoss && m.Config.ZLoss == 0 && (m.Memory.LossChunk == 0 || m.Memory.KeepFusedLoss) {
		logits := m.rowLogits(params, x, f) // [B·T, V]
		return mlx.Mean(mlx.CrossEntropy(logits, mlx.Reshape(y, y.Size())))
	}
	ce, lse := m.rowTerms(params, x, y, f)
	loss := mlx.Mean(ce)
	if m.Config.ZLoss > 0 {
		loss = mlx.Add(loss, mlx.MulScalar(mlx.Mean(mlx.Square(lse)), m.Config.ZLoss))
	}
	return loss
}

// TokenLosses returns the next-token cross-entropy at every position of
// tokens x against targets y (both [B, T] int32): a [B, T] float32 array,
// −log softmax(logits)[target], computed in float32 from the logits on
// every device. Its mean is Loss without the z-loss term. It is what
// held-out evaluation averages.
func (m *Transformer) TokenLosses(params []*mlx.Array, x, y *mlx.Array) *mlx.Array {
	ce, _ := m.LossTerms(params, x, y)
	return ce
}

// LossTerms returns the two per-position terms of Loss from one forward
// pass, both [B, T] float32: the cross-entropy (TokenLosses) and the
// logsumexp of the logits, whose mean square is the z-loss penalty that
// Loss weights by ZLoss. Summing them under a mask is how evaluation
// leaves padding positions out.
func (m *Transformer) LossTerms(params []*mlx.Array, x, y *mlx.Array) (ce, lse *mlx.Array) {
	if err := checkTargets(x, y); err != nil {
		return mlx.ErrorArray(err), mlx.ErrorArray(err)
	}
	ce, lse = m.rowTerms(params, x, y, m.formulation())
	if err := ce.Err(); err != nil {
		return ce, mlx.ErrorArray(err)
	}
	B, T := x.Dim(0), x.Dim(1) // rowTerms checked that x is [B, T]
	return mlx.Reshape(ce, B, T), mlx.Reshape(lse, B, T)
}

// checkTargets reports an error carried by x or y, or targets whose shape
// differs from the tokens'.
func checkTargets(x, y *mlx.Array) error {
	if err := y.Err(); err != nil {
		return err
	}
	if x.Err() == nil && !slices.Equal(x.Shape(), y.Shape()) {
		return fmt.Errorf("model: targets have shape %v, tokens %v; want the same", y.Shape(), x.Shape())
	}
	return nil
}

// rowTerms is LossTerms over the flattened positions, [B·T] each: the
// float32 path that Loss, TokenLosses and evaluation share.
func (m *Transformer) rowTerms(params []*mlx.Array, x, y *mlx.Array, f formulation) (ce, lse *mlx.Array) {
	if m.Memory.LossChunk > 0 {
		return m.chunkedTerms(params, x, y, f)
	}
	logits := mlx.AsType(m.rowLogits(params, x, f), mlx.Float32) // [B·T, V]
	return logitTerms(logits, mlx.Reshape(y, y.Size()))
}
