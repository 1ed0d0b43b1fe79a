package model

import (
	"fmt"

	"github.com/posttrainllm/posttrainllm/mlx"
)

// chunkedLoss computes the loss's per-row terms from the final rows h
// [R, D] and the output projection's weight head [PV, D], chunk rows at a
// time, as one function with a written VJP (mlx.CustomVJP), so that the
// [R, PV] logits exist one chunk at a time in the forward pass and in the
// backward pass alike:
//
//   - forward, chunk by chunk: the logits h_c·headᵀ (with the padding
//     rows' −∞ bias), upcast to float32, their logsumexp lse_c and the
//     cross-entropy ce_c = lse_c − logits_c[y_c]. Autodiff keeps only the
//     inputs h, head, y and the outputs ce, lse [R] for the backward pass.
//   - backward, chunk by chunk: the logits recomputed, their gradient
//     (dce_c + dlse_c)·softmax − dce_c·onehot(y_c) formed from the saved
//     lse, cast to the logits' dtype, and from it h_c's gradient (·head)
//     and head's (ᵀ·h_c in the compute dtype, accumulated over the chunks
//     in float32).
//
// Nothing in the graph would otherwise order the chunks: MLX may run
// every chunk's projection before any chunk's reduction and hold all the
// logits at once. So chunk c+1 reads h through mlx.Depends on chunk c's
// results (forward: ce_c and lse_c; backward: h_c's gradient), and the
// first backward chunk waits for the cotangents, which also keeps MLX's
// compiler from merging the backward recomputation with the forward
// projection. With trainedHead chunk c+1 also waits for head's gradient
// accumulated over chunks 0…c; without it head's gradient stays out of
// the chain, so that where head is frozen nothing reads it and MLX never
// computes it (a [V, D] float32 accumulator and a multiply per chunk
// saved), and where it is trained after all MLX computes it later,
// holding more chunks' gradients meanwhile. The model sets trainedHead
// unless Linears replace projections (adapter fine-tunes, whose head is
// frozen); either way the gradients are the same
// (TestChunkedLossBoundsPeakMemory measures both). The cotangents arrive
// per row, so a weighted cross-entropy and a z-loss on lse differentiate
// as they do through the whole logits.
//
// The ordering bounds what is computed at once, not what is queued: MLX
// queues about 100 operations ahead of the computation and allocates each
// one's output as it queues it, so the logits of the chunks within that
// window (a dozen operations per chunk) coexist. The loss's memory is
// therefore about min(chunks, ~10) chunks' logits: smaller chunks lower it
// (TestChunkedLossBoundsPeakMemory, BenchmarkChunkedLoss), and an MLX
// memory limit below the step's peak (mlx.SetMemoryLimit), which makes
// MLX wait for queued work before queueing more, brings it to one or two.
type chunkedLoss struct {
	chunk     int // rows per chunk
	vocab, pv int // real and padded vocabulary: rows vocab…pv of head are padding
	// trainedHead orders head's gradient with the chunks too (see above).
	trainedHead bool
	// linear, where set, computes the head's projection in head's place: a
	// frozen head held in a form of its own (a quantized tied embedding or
	// output head). The logits are its Apply and h's gradient its ApplyT,
	// over its arrays, which the function takes as inputs after y; it
	// returns zeros for head's and their gradients, which nothing reads.
	// A linear with Dense is converted whole once per pass (dense) and
	// the chunks multiply the float head.
	linear *Linear
}

// dense returns c for chunks that multiply a float head, and that head:
// with a linear that has Dense, its float weight converted from its
// arrays extra, after deps (nil for none), in dtype; otherwise c and head
// as they are.
func (c chunkedLoss) dense(head *mlx.Array, extra, deps []*mlx.Array, dtype mlx.Dtype) (chunkedLoss, *mlx.Array) {
	if c.linear == nil || c.linear.Dense == nil {
		return c, head
	}
	if len(deps) > 0 {
		extra = mlx.Depends(extra, deps)
	}
	w := castTo(c.linear.Dense(extra), dtype)
	c.linear = nil
	return c, w
}

// terms returns ce and lse [R] float32 of rows h [R, D] for targets y [R].
func (c chunkedLoss) terms(h, head, y *mlx.Array) (ce, lse *mlx.Array) {
	fail := func(err error) (*mlx.Array, *mlx.Array) {
		err = fmt.Errorf("model: chunked loss: %w", err)
		return mlx.ErrorArray(err), mlx.ErrorArray(err)
	}
	if c.chunk < 1 {
		return fail(fmt.Errorf("chunk of %d rows, want at least 1", c.chunk))
	}
	if err := h.Err(); err != nil {
		return fail(err)
	}
	if h.Ndim() != 2 || head.Ndim() != 2 || y.Ndim() != 1 || y.Dim(0) != h.Dim(0) || (c.linear == nil && head.Dim(1) != h.Dim(1)) {
		return fail(fmt.Errorf("rows %v, head %v, targets %v; want [R, D], [V, D] and [R]", h.Shape(), head.Shape(), y.Shape()))
	}
	in := []*mlx.Array{h, head, y}
	if c.linear != nil {
		if c.linear.Apply == nil || c.linear.ApplyT == nil {
			return fail(fmt.Errorf("the output head's Linear needs Apply and ApplyT"))
		}
		in = append(in, c.linear.Arrays...)
	}
	fn, err := mlx.CustomVJP(c.forward, c.backward)
	if err != nil {
		return fail(err)
	}
	defer fn.Free() // the traced graph holds what its backward pass needs
	out, err := fn.Call(in...)
	if err != nil {
		return fail(err)
	}
	return out[0], out[1]
}

// logits returns the chunk's logits h·headᵀ in the compute dtype, the
// padding rows' columns at −∞; with a linear, its Apply over its arrays
// extra.
func (c chunkedLoss) logits(h, head *mlx.Array, extra []*mlx.Array) *mlx.Array {
	if c.linear != nil {
		logits := c.linear.Apply(h, extra)
		if c.pv > c.vocab {
			logits = mlx.Add(logits, paddingBias(c.vocab, c.pv, logits.Dtype()))
		}
		return logits
	}
	if c.pv > c.vocab {
		return mlx.AddMM(paddingBias(c.vocab, c.pv, h.Dtype()), h, mlx.Transpose(head), 1, 1)
	}
	return mlx.Matmul(h, mlx.Transpose(head))
}

// rowsGrad returns the gradient of rows h from the gradient g of their
// logits (logits' transpose): the linear's ApplyT, or g·head.
func (c chunkedLoss) rowsGrad(g, head *mlx.Array, extra []*mlx.Array) *mlx.Array {
	if c.linear != nil {
		return c.linear.ApplyT(g, extra)
	}
	return mlx.Matmul(g, head)
}

// chunks calls fn for the row range of every chunk of rows rows.
func (c chunkedLoss) chunks(rows int, fn func(start, end int)) {
	for start := 0; start < rows; start += c.chunk {
		fn(start, min(start+c.chunk, rows))
	}
}

// after returns a after deps have been computed (a itself without deps).
func after(a *mlx.Array, deps []*mlx.Array) *mlx.Array {
	if len(deps) == 0 {
		return a
	}
	return mlx.Depends([]*mlx.Array{a}, deps)[0]
}

// rowsOf returns rows start…end of a [R] or [R, D] array.
func rowsOf(a *mlx.Array, start, end int) *mlx.Array {
	if a.Ndim() == 1 {
		return mlx.Slice(a, []int{start}, []int{end})
	}
	return mlx.Slice(a, []int{start, 0}, []int{end, a.Dim(1)})
}

// join concatenates the chunks' rows.
func join(parts []*mlx.Array) *mlx.Array {
	if len(parts) == 1 {
		return parts[0]
	}
	return mlx.Concatenate(parts, 0)
}

// forward is the CustomVJP's function: (h, head, y) → (ce, lse).
func (c chunkedLoss) forward(in []*mlx.Array) ([]*mlx.Array, error) {
	h, head, y, extra := in[0], in[1], in[2], in[3:]
	c, head = c.dense(head, extra, nil, h.Dtype())
	var ces, lses, deps []*mlx.Array
	c.chunks(h.Dim(0), func(start, end int) {
		logits := mlx.AsType(c.logits(rowsOf(after(h, deps), start, end), head, extra), mlx.Float32)
		lse := mlx.LogSumExp(logits, -1)
		target := mlx.Squeeze(mlx.TakeAlongAxis(logits, mlx.ExpandDims(rowsOf(y, start, end), -1), -1), -1)
		ce := mlx.Subtract(lse, target)
		ces, lses = append(ces, ce), append(lses, lse)
		deps = []*mlx.Array{ce, lse}
	})
	ce, lse := join(ces), join(lses)
	return []*mlx.Array{ce, lse}, ce.Err()
}

// backward is the CustomVJP's gradient: the cotangents of h, head and y
// (zero: the targets are indices) from those of ce and lse, and with a
// linear zeros for its frozen arrays and head.
func (c chunkedLoss) backward(primals, cotangents, outputs []*mlx.Array) ([]*mlx.Array, error) {
	if c.linear != nil {
		return c.frozenBackward(primals, cotangents, outputs)
	}
	h, head, y := primals[0], primals[1], primals[2]
	dce, dlse, lse := cotangents[0], cotangents[1], outputs[1]
	ids := mlx.Arange(0, float64(head.Dim(0)), 1, y.Dtype())
	var dhs []*mlx.Array
	var dhead *mlx.Array // float32 [PV, D]
	deps := []*mlx.Array{dce, dlse}
	c.chunks(h.Dim(0), func(start, end int) {
		hc := rowsOf(after(h, deps), start, end)
		g := c.logitsGrad(hc, head, nil, y, dce, dlse, lse, ids, start, end)
		dh := castTo(c.rowsGrad(g, head, nil), h.Dtype())
		switch {
		case dhead == nil:
			dhead = castTo(mlx.Matmul(mlx.Transpose(g), hc), mlx.Float32)
		case g.Dtype() == mlx.Float32:
			dhead = mlx.AddMM(dhead, mlx.Transpose(g), hc, 1, 1)
		default: // the product in the compute dtype, added in float32
			dhead = mlx.Add(dhead, mlx.AsType(mlx.Matmul(mlx.Transpose(g), hc), mlx.Float32))
		}
		dhs = append(dhs, dh)
		deps = []*mlx.Array{dh}
		if c.trainedHead {
			deps = append(deps, dhead)
		}
	})
	return []*mlx.Array{join(dhs), castTo(dhead, head.Dtype()), mlx.ZerosLike(y)}, nil
}

// castTo returns a in dtype, a itself when it is already.
func castTo(a *mlx.Array, dtype mlx.Dtype) *mlx.Array {
	if a.Dtype() == dtype {
		return a
	}
	return mlx.AsType(a, dtype)
}

// logitsGrad recomputes the logits of chunk start…end (rows hc) and
// returns their gradient (dce + dlse)·softmax − dce·onehot(y) in the
// logits' dtype, from the saved lse.
func (c chunkedLoss) logitsGrad(hc, head *mlx.Array, extra []*mlx.Array, y, dce, dlse, lse, ids *mlx.Array, start, end int) *mlx.Array {
	computed := c.logits(hc, head, extra)
	logits := mlx.AsType(computed, mlx.Float32)
	dceC := mlx.ExpandDims(rowsOf(dce, start, end), -1)
	scale := mlx.Add(dceC, mlx.ExpandDims(rowsOf(dlse, start, end), -1))
	softmax := mlx.Exp(mlx.Subtract(logits, mlx.ExpandDims(rowsOf(lse, start, end), -1)))
	onehot := mlx.AsType(mlx.Equal(ids, mlx.ExpandDims(rowsOf(y, start, end), -1)), mlx.Float32)
	return mlx.AsType(mlx.Subtract(mlx.Multiply(softmax, scale), mlx.Multiply(onehot, dceC)), computed.Dtype())
}

// frozenBackward is backward with a linear: h's gradient chunk by chunk
// through its ApplyT (with Dense, against the float head converted once),
// each chunk after the previous one's, and zeros for the frozen head, y
// and the linear's arrays.
func (c chunkedLoss) frozenBackward(primals, cotangents, outputs []*mlx.Array) ([]*mlx.Array, error) {
	h, head, y, extra := primals[0], primals[1], primals[2], primals[3:]
	dce, dlse, lse := cotangents[0], cotangents[1], outputs[1]
	ids := mlx.Arange(0, float64(c.pv), 1, y.Dtype())
	var dhs []*mlx.Array
	deps := []*mlx.Array{dce, dlse}
	// A dense head is converted again once the cotangents have arrived,
	// so that no float head lives from the forward pass to this one.
	lc, w := c.dense(head, extra, deps, h.Dtype())
	c.chunks(h.Dim(0), func(start, end int) {
		hc := rowsOf(after(h, deps), start, end)
		g := lc.logitsGrad(hc, w, extra, y, dce, dlse, lse, ids, start, end)
		dh := castTo(lc.rowsGrad(g, w, extra), h.Dtype())
		dhs = append(dhs, dh)
		deps = []*mlx.Array{dh}
	})
	out := []*mlx.Array{join(dhs), mlx.ZerosLike(head), mlx.ZerosLike(y)}
	for _, a := range extra {
		out = append(out, mlx.ZerosLike(a))
	}
	return out, out[0].Err()
}
