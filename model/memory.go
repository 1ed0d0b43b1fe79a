package model

import (
	"fmt"
	"reflect"
	"unsafe"

	"github.com/posttrainllm/posttrainllm/mlx"
)

// Memory trades compute for memory in the model's differentiable
// functions (Loss, LossTerms, LossTermsWith) without changing their
// values or gradients.
type Memory struct {
	// Checkpoint keeps only each transformer block's input for the
	// backward pass and recomputes the block's activations there
	// (mlx.Checkpoint): activation memory of one block instead of all,
	// for about one more forward pass of compute.
	Checkpoint bool
	// LossChunk computes the logits and the loss's terms LossChunk rows
	// (positions) at a time, each chunk upcast to float32 on its own and
	// recomputed in the backward pass, the chunks run one after another,
	// so that no [positions, vocabulary] array exists whole, in float32 or
	// in the compute dtype: the loss holds the logits of the few chunks
	// MLX has queued at once (chunkedLoss), for one more output projection
	// of compute; 0 computes them whole.
	LossChunk int
	// KeepFusedLoss leaves Loss on MLX's fused cross-entropy where the
	// formulation has it (a GPU, no z-loss) whatever LossChunk says: that
	// kernel reads the compute-dtype logits without a float32 copy, and
	// chunking it measured slower with a higher peak. LossChunk then
	// applies to the loss terms (fine-tunes' weighted losses, z-loss),
	// which upcast the whole logits to float32. The automatic setting
	// (train.Config.ModelMemory) sets it.
	KeepFusedLoss bool
}

// fields lists pointers to the block's arrays that are set, every
// *mlx.Array field in declaration order (found by reflection, so a field
// added to block is a checkpoint input without further code): a copy of
// the block lists its own in the same order.
func (b *block) fields() []**mlx.Array {
	v := reflect.ValueOf(b).Elem()
	arrayType := reflect.TypeFor[*mlx.Array]()
	var out []**mlx.Array
	for i := range v.NumField() {
		f := v.Field(i)
		if f.Type() != arrayType || f.IsNil() {
			continue
		}
		out = append(out, (**mlx.Array)(unsafe.Pointer(f.UnsafeAddr())))
	}
	return out
}

// checkpointedBlock is block l of a forward pass without a KV cache, run
// inside mlx.Checkpoint: its inputs are the residual stream x, the block's
// weights, the arrays of its Linears and the document mask of packed rows,
// so their gradients flow as
// without the checkpoint, and MLX keeps only those inputs for the
// backward pass, where it runs the block again.
func (m *Transformer) checkpointedBlock(f formulation, b block, x *mlx.Array, B, T, l int) *mlx.Array {
	fields := b.fields()
	in := []*mlx.Array{x}
	for _, p := range fields {
		in = append(in, *p)
	}
	type slot struct {
		field int
		lin   Linear
	}
	var slots []slot
	for k, p := range fields {
		if lin, ok := f.proj.lin[*p]; ok {
			slots = append(slots, slot{k, lin})
			in = append(in, lin.Arrays...)
		}
	}
	// The document mask of packed rows is an input too: the recomputation
	// runs after the forward pass has released its own arrays.
	if f.docMask != nil {
		in = append(in, f.docMask)
	}
	fn := func(args []*mlx.Array) ([]*mlx.Array, error) {
		g, gelu, ks, free, err := m.freshParts(f, B, T)
		if err != nil {
			return nil, err
		}
		defer free()
		nb := b
		nf := nb.fields()
		for k, p := range nf {
			*p = args[1+k]
		}
		if len(slots) > 0 {
			g.proj.lin = make(map[*mlx.Array]Linear, len(slots))
			pos := 1 + len(nf)
			for _, s := range slots {
				n := len(s.lin.Arrays)
				g.proj.lin[*nf[s.field]] = Linear{Arrays: args[pos : pos+n], Apply: s.lin.Apply, Group: s.lin.Group}
				pos += n
			}
		}
		if f.docMask != nil {
			g.docMask = mlx.StopGradient(args[len(args)-1])
		}
		// A rotation of its own: forwardTo's (and its frequency table) is
		// released by the time the backward pass recomputes the block.
		out := m.block(g, ks, m.newRotary(0, nil), gelu, nb, args[0], B, T, nil, l)
		return []*mlx.Array{out}, out.Err()
	}
	c, err := mlx.Checkpoint(fn)
	if err != nil {
		return mlx.ErrorArray(fmt.Errorf("model: checkpoint of block %d: %w", l, err))
	}
	defer c.Free() // the traced graph holds what its backward pass needs
	out, err := c.Call(in...)
	if err != nil {
		return mlx.ErrorArray(fmt.Errorf("model: block %d: %w", l, err))
	}
	return out[0]
}

// chunkedTerms is rowTerms with Memory.LossChunk: the output projection,
// the float32 upcast, the logsumexp and the target's logit run per chunk
// of rows, forward and backward, one chunk after another (chunkedLoss), so
// that only one chunk's logits exist at a time.
func (m *Transformer) chunkedTerms(params []*mlx.Array, x, y *mlx.Array, f formulation) (ce, lse *mlx.Array) {
	y = mlx.Reshape(y, y.Size())
	out := m.forwardTo(params, x, nil, f, func(m *Transformer, f formulation, h, head *mlx.Array) []*mlx.Array {
		ce, lse := m.headTerms(f, h, head, y)
		return []*mlx.Array{ce, lse}
	})
	return out[0], out[1]
}

// freshParts returns f with projections of its own, and the GELU and
// kernels of a forward pass over [B, T] tokens without a cache, for a
// function that MLX calls again after forwardTo has returned and freed
// its own (a checkpoint's recomputation in the backward pass). free
// releases them.
func (m *Transformer) freshParts(f formulation, B, T int) (formulation, activation, kernels, func(), error) {
	var gelu activation
	var err error
	if !m.Config.swiGLU() {
		if gelu, err = newGELU(m.Config.GELU, f.writtenGELU); err != nil {
			return f, gelu, kernels{}, nil, err
		}
	}
	ks, err := m.newKernels(f, B, T, false)
	if err != nil {
		gelu.Free()
		return f, gelu, ks, nil, err
	}
	lin := f.proj.lin
	if f.proj, err = newProjections(f.writtenProjectionVJPs); err != nil {
		gelu.Free()
		ks.Free()
		return f, gelu, ks, nil, err
	}
	f.proj.lin = lin
	proj := f.proj
	return f, gelu, ks, func() { gelu.Free(); ks.Free(); proj.Free() }, nil
}
