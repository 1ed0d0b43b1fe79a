package model

import (
	"fmt"

	"github.com/posttrainllm/posttrainllm/mlx"
)

// The token embedding and the output head can be held in a form of their
// own too (a frozen base quantized for an adapter fine-tune, as mlx-lm's
// QuantizedEmbedding holds them): a Linear of the token embedding looks up
// rows by its Rows, and, the head being tied, computes the logits by its
// Apply (and the chunked loss's gradient by its ApplyT); a Linear of an
// untied head does the last two. The model then never forms the float
// [PaddedVocab, D] table.

// TokenEmbeddingName is the token embedding table's parameter name.
const TokenEmbeddingName = "tok_embeddings.weight"

// Quantizable reports whether a frozen base may hold parameter p in a form
// of its own (a Linear replaces it): a transformer block's projection
// weight, the token embedding table (the learned positions are added
// whole, so they stay float) or the untied output head.
func (p ParamSpec) Quantizable() bool {
	switch p.Kind {
	case Matrix:
		return isBlockProjection(p.Name)
	case Embedding:
		return p.Name == TokenEmbeddingName
	case Head:
		return true
	}
	return false
}

// checkLinear refuses a Linear for parameter i that the model cannot use:
// one for a parameter that is not Quantizable, a token embedding's without
// Rows (or, tied, without Apply), a projection's or head's without Apply.
func (m *Transformer) checkLinear(i int, l Linear) error {
	if i < 0 || i >= len(m.Specs) || !m.Specs[i].Quantizable() {
		return fmt.Errorf("model: a Linear for parameter %d, want the index of a block projection's weight, the token embedding or the output head", i)
	}
	s := m.Specs[i]
	if s.Kind == Embedding && l.Rows == nil {
		return fmt.Errorf("model: the Linear of %s has no Rows; the token embedding is looked up by rows", s.Name)
	}
	if l.Apply == nil && (s.Kind != Embedding || m.Config.TiedEmbeddings) {
		return fmt.Errorf("model: the Linear of %s has no Apply", s.Name)
	}
	return nil
}

// tokenRows returns the token embeddings of ids [N] from table, the
// token embedding as the blocks hold it, in dtype (the compute dtype):
// through the table's Linear where one replaces it (only the looked-up
// rows are converted), otherwise embed's gather.
func (f formulation) tokenRows(table, ids *mlx.Array, differentiable bool, dtype mlx.Dtype) *mlx.Array {
	if l, ok := f.proj.lin[table]; ok && l.Rows != nil {
		return castTo(l.Rows(ids, l.Arrays), dtype)
	}
	return f.embed(table, ids, differentiable)
}

// headLinear returns the Linear that replaces the output head head (the
// array the model holds for it), and whether there is one.
func (f formulation) headLinear(head *mlx.Array) (Linear, bool) {
	l, ok := f.proj.lin[head]
	return l, ok
}
