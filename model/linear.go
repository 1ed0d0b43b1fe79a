package model

import (
	"fmt"
	"strings"

	"github.com/posttrainllm/posttrainllm/mlx"
)

// Linear is a projection x·Wᵀ that the model computes by a function
// instead of from one weight array: a frozen base, possibly quantized,
// with a low-rank adapter applied beside it (peft), so that no merged
// weight is formed per microbatch. Apply reads Arrays, which are passed
// to it rather than captured, so that a transform that re-runs a block
// (Memory.Checkpoint) sees them as inputs and differentiates them.
type Linear struct {
	Arrays []*mlx.Array
	// Apply returns x·Wᵀ for rows x [R, in] in x's dtype.
	Apply func(x *mlx.Array, arrays []*mlx.Array) *mlx.Array
	// Group, when set, lists the parameter indices of projections that
	// share their input and that this Linear computes together, Apply
	// returning their outputs concatenated along the last axis in Group's
	// order: a block's wq, wk and wv, or SwiGLU's w1 and w3 (ProjectionGroups).
	// The model then keeps its stacked formulation for them (one matmul
	// instead of several, and on a CUDA GPU one kernel for the heads).
	// Linears holds such a Linear under Group[0] and no Linear under the
	// other members.
	Group []int
	// Rows returns rows ids [N] of W, [N, in]: the lookup of a token
	// embedding table held in a form of its own (quantized), which gathers
	// and converts only the rows it is asked for. Needed by a Linear of the
	// token embedding; nil elsewhere.
	Rows func(ids *mlx.Array, arrays []*mlx.Array) *mlx.Array
	// ApplyT returns g·W for rows g [R, out] in g's dtype: the gradient of
	// x·Wᵀ with respect to x, which the chunked loss forms itself for the
	// output head (Memory.LossChunk). Needed there; nil elsewhere.
	ApplyT func(g *mlx.Array, arrays []*mlx.Array) *mlx.Array
	// Dense, when set, returns W [out, in] whole as a float array in the
	// dtype of Apply's product: a frozen output head held in a form of its
	// own (quantized) that the chunked loss converts once per pass and
	// multiplies as a float weight, instead of running Apply and ApplyT
	// on its own form chunk by chunk. Optional, and only for the output
	// head.
	Dense func(arrays []*mlx.Array) *mlx.Array
}

// apply is l.Apply over l's own arrays.
func (l Linear) apply(x *mlx.Array) *mlx.Array { return l.Apply(x, l.Arrays) }

// Linears maps indices of parameters (Specs order) that a frozen base may
// hold in a form of its own (ParamSpec.Quantizable: the transformer
// blocks' projections, the token embedding, an untied output head) to the
// Linears that replace them; the parameter list passed with them may hold
// any array in those slots (the model does not read it, but each must be
// an array of its own).
type Linears map[int]Linear

// LossTermsWith is LossTerms with the projections of lin computed by
// their Linears.
func (m *Transformer) LossTermsWith(params []*mlx.Array, lin Linears, x, y *mlx.Array) (ce, lse *mlx.Array) {
	if err := checkTargets(x, y); err != nil {
		return mlx.ErrorArray(err), mlx.ErrorArray(err)
	}
	f := m.formulation()
	if err := m.setLinears(&f, lin); err != nil {
		return mlx.ErrorArray(err), mlx.ErrorArray(err)
	}
	ce, lse = m.rowTerms(params, x, y, f)
	if err := ce.Err(); err != nil {
		return ce, mlx.ErrorArray(err)
	}
	B, T := x.Dim(0), x.Dim(1)
	return mlx.Reshape(ce, B, T), mlx.Reshape(lse, B, T)
}

// LogitsWith is Logits with the projections of lin computed by their
// Linears.
func (m *Transformer) LogitsWith(params []*mlx.Array, lin Linears, tokens *mlx.Array) *mlx.Array {
	var out *mlx.Array
	mlx.Do(func() error {
		f := m.formulation()
		if err := m.setLinears(&f, lin); err != nil {
			out = mlx.ErrorArray(err)
			return nil
		}
		logits := m.rowLogits(params, tokens, f)
		if out = logits; logits.Err() == nil {
			out = mlx.Reshape(logits, tokens.Dim(0), tokens.Dim(1), logits.Dim(-1))
		}
		return nil
	})
	return out
}

// setLinears checks lin against the layout and puts it into f. A block
// whose q, k or v weight has a Linear of its own projects them one by one
// (the stacked formulation would concatenate weights it no longer has);
// one whose three share a grouped Linear keeps the stacked formulation.
func (m *Transformer) setLinears(f *formulation, lin Linears) error {
	for i, l := range lin {
		if err := m.checkLinear(i, l); err != nil {
			return err
		}
		if l.Group == nil {
			continue
		}
		if err := m.checkGroup(l.Group); err != nil {
			return err
		}
		if l.Group[0] != i {
			return fmt.Errorf("model: the Linear of group %v is held under parameter %d, want %d", l.Group, i, l.Group[0])
		}
		for _, j := range l.Group[1:] {
			if _, ok := lin[j]; ok {
				return fmt.Errorf("model: parameter %d has a Linear of its own and is in group %v", j, l.Group)
			}
		}
	}
	f.linears = lin
	return nil
}

// isBlockProjection reports whether a parameter name is that of a
// transformer block's weight (blocks.3.attn.wq.weight).
func isBlockProjection(name string) bool {
	return strings.HasPrefix(name, "blocks.") && strings.HasSuffix(name, ".weight")
}

// withLinears returns f with its Linears keyed by the arrays the blocks
// hold: flat, the parameter list as unpack left it.
func (f formulation) withLinears(flat []*mlx.Array) formulation {
	if len(f.linears) == 0 {
		return f
	}
	f.proj.lin = make(map[*mlx.Array]Linear, len(f.linears))
	for i, l := range f.linears {
		f.proj.lin[flat[i]] = l
	}
	return f
}

// replaced reports whether w's projection is computed by a Linear.
func (p projections) replaced(w *mlx.Array) bool {
	_, ok := p.lin[w]
	return ok && w != nil
}

// addBias is y + b, or y for a nil b.
func addBias(y, b *mlx.Array) *mlx.Array {
	if b == nil {
		return y
	}
	return mlx.Add(y, b)
}
