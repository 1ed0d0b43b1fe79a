package model

import "github.com/posttrainllm/posttrainllm/mlx"

// formulation is how the model's pure functions write the few operations
// whose fastest form depends on the backend. Every formulation computes the
// same function of the same parameters (reference_test.go checks losses and
// gradients), so checkpoints do not depend on it; only the graph MLX runs
// does.
//
// On a GPU a small model's step is bound by how many kernels it launches,
// and each field below saves kernels (docs/performance/gpu.md). On the CPU
// there is no launch cost to save, every graph node is work for one core,
// and MLX's compiler fuses elementwise chains into one C++ kernel, so the
// same choices can cost time instead (docs/performance/cpu.md).
type formulation struct {
	// writtenGELU is the GELU as a custom VJP with its derivative written
	// out; otherwise MLX differentiates the GELU's ops (newGELU).
	writtenGELU bool
	// stackedProjections projects q, k and v with one matmul against
	// [wq; wk; wv], and SwiGLU's (GeGLU's) gate and up with one against
	// [w1; w3], the weights concatenated in every step; otherwise one
	// matmul per weight.
	stackedProjections bool
	// stackedGiven projects q, k and v with one matmul where their weights
	// are given stacked (block.wqkv) even without stackedProjections:
	// generation, which stacks no weights itself, still uses a stacked
	// weight as it is rather than as three views.
	stackedGiven bool
	// addMMResidual adds the residual inside the output projection's GEMM
	// (AddMM); otherwise a matmul and an add.
	addMMResidual bool
	// fusedLoss uses MLX's fused cross-entropy kernel on the compute-dtype
	// logits; otherwise the float32 path (rowTerms). Only for a loss
	// without z-loss.
	fusedLoss bool
	// cudaKernels runs the model's own CUDA kernels (kernels.go) for
	// attention's heads and RMSNorm (forward and backward, the residual's
	// gradient added in the backward kernel), in a forward pass without a
	// KV cache; otherwise MLX's RoPE, split and RMSNorm.
	cudaKernels bool
	// writtenProjectionVJPs differentiates the projections with written
	// VJPs that form each weight's gradient row-major, as dYᵀ·x
	// (projection.go); otherwise MLX's matmul VJP, whose weight gradient
	// is a transposed view that the flat layout's reshape copies.
	writtenProjectionVJPs bool
	// float32Gather gathers the token embeddings' rows from the table cast
	// to float32 and casts them back, so that the gather's gradient, a
	// scatter-add of the rows' gradients into the table, adds in float32
	// (embed); otherwise it adds in the table's dtype. On a CUDA GPU a
	// bfloat16 scatter-add serialises on the rows of frequent tokens: on
	// real text (tinyshakespeare, GPT-2 tokens) it took 3.3 ms of the huge
	// preset's 10.4 ms step, against 0.03 ms on uniformly random tokens.
	float32Gather bool

	// proj are the projections of one forward pass, built by forward from
	// writtenProjectionVJPs.
	proj projections
	// linears replace projections by parameter index (LossTermsWith).
	linears Linears
	// seg numbers the examples packed into each row (PackedLossTerms);
	// forward turns it into docMask, the attention mask, and, for learned
	// positions, positions within each example.
	seg, docMask *mlx.Array
}

// formulationFor returns the formulation the model uses on device d for
// config c: each choice is the faster one measured on that backend.
func formulationFor(d mlx.Device, c Config) formulation {
	if d == mlx.GPU {
		// The kernels are CUDA C++: on a Metal GPU MLX's own operations run.
		return formulation{writtenGELU: true, stackedProjections: true, addMMResidual: true, fusedLoss: c.ZLoss == 0,
			cudaKernels: mlx.CUDAAvailable(), writtenProjectionVJPs: true, float32Gather: true}
	}
	// On the CPU the plain formulation costs least: the written-out GELU
	// adds a fifth to the forward and backward pass, and the stacked
	// projections (a concatenation of the weights and strided splits every
	// step: in a decode step, a copy of the MLP's weights per token) and
	// the AddMM residuals a few percent more (BenchmarkFormulations,
	// docs/performance/cpu.md). MLX's CPU cross-entropy kernel falls back
	// to the float32 path's ops and computes in the logits' dtype, so the
	// CPU keeps the explicit float32 path.
	return formulation{}
}

// formulation is formulationFor the default device. It reads MLX state, so
// it runs on the MLX thread (inside mlx.Do).
func (m *Transformer) formulation() formulation {
	return formulationFor(mlx.DefaultDevice(), m.Config)
}

// StackedQKV returns Config.QKVRuns when the model's formulation on the
// default device projects q, k and v with one matmul (a GPU): a caller
// holding the three weights stacked then saves concatenating them in
// every step and forms one weight gradient instead of three. It returns
// nil on the CPU, where the projections run as three matmuls and a
// stacked weight would only add a concatenation of their gradients.
// Like Loss it reads MLX state on the MLX thread and may be called from
// any goroutine.
func (m *Transformer) StackedQKV() [][]int {
	var stacked bool
	mlx.Do(func() error { stacked = m.formulation().stackedProjections; return nil })
	if !stacked {
		return nil
	}
	return m.Config.QKVRuns()
}

// qkv returns the q, k and v projections of rows x [B·T, D], with their
// biases where the family has them: q is [B·T, qDim], k and v [B·T, kvDim]
// (kvDim < qDim with grouped-query attention). Weights passed stacked
// (block.wqkv, StackedQKV) are used as they are: by the stacked formulation directly,
// by the plain one split into three views.
func (f formulation) qkv(b block, x *mlx.Array, qDim, kvDim int) (q, k, v *mlx.Array) {
	if f.stackedFor(b) {
		s := mlx.SplitAt(f.qkvRows(b, x), []int{qDim, qDim + kvDim}, -1)
		return s[0], s[1], s[2]
	}
	wq, wk, wv := b.wq, b.wk, b.wv
	if b.wqkv != nil {
		w := mlx.SplitAt(b.wqkv, []int{qDim, qDim + kvDim}, 0)
		wq, wk, wv = w[0], w[1], w[2]
	}
	return f.proj.linear(x, wq, b.bq), f.proj.linear(x, wk, b.bk), f.proj.linear(x, wv, b.bv)
}

// qkvRows is the stacked formulation's projection of rows x [B·T, D]
// against [wq; wk; wv] (and the stacked biases): [B·T, qDim + 2·kvDim],
// by the three's grouped Linear where they have one.
func (f formulation) qkvRows(b block, x *mlx.Array) *mlx.Array {
	var bias *mlx.Array
	if b.bq != nil {
		bias = mlx.Concatenate([]*mlx.Array{b.bq, b.bk, b.bv}, 0)
	}
	if l, ok := f.proj.grouped(b.wq); ok {
		return addBias(l.apply(x), bias)
	}
	w := b.wqkv
	if w == nil {
		w = mlx.Concatenate([]*mlx.Array{b.wq, b.wk, b.wv}, 0)
	}
	return f.proj.linear(x, w, bias)
}

// embed returns rows ids of table, the token embeddings of a forward
// pass. With float32Gather, and a table in a narrower dtype, the rows come
// from the table cast to float32 and are cast back: the same values, but
// autodiff then scatters their gradients into a float32 table, rounded to
// the table's dtype once, instead of adding them one by one in that dtype.
// A pass that cannot be differentiated (differentiable false: generation
// with a KV cache) gathers from the table directly and skips the casts.
func (f formulation) embed(table, ids *mlx.Array, differentiable bool) *mlx.Array {
	if !f.float32Gather || !differentiable || table.Dtype() == mlx.Float32 {
		return mlx.Take(table, ids, 0)
	}
	return mlx.AsType(mlx.Take(mlx.AsType(table, mlx.Float32), ids, 0), table.Dtype())
}

// residual returns x + h·Wᵀ for rows x [B·T, out] and h [B·T, in], a
// residual connection around a projection stored [out, in]; as one matrix
// multiply-add when addMMResidual is set, where a GPU runs the addition in
// the GEMM's epilogue instead of as a kernel of its own.
func (f formulation) residual(x, h, w *mlx.Array) *mlx.Array {
	if !f.addMMResidual {
		return mlx.Add(x, f.proj.linear(h, w, nil))
	}
	return f.proj.addLinear(x, h, w)
}

// residualBias is residual plus the projection's bias b (nil for none).
func (f formulation) residualBias(x, h, w, b *mlx.Array) *mlx.Array {
	if b == nil {
		return f.residual(x, h, w)
	}
	return mlx.Add(f.residual(x, h, w), b)
}

// allFormulations lists every combination of the choices that runs on any
// device, for tests and benchmarks that compare them; cudaKernels runs
// only on a CUDA GPU (model/gpu_test.go compares it there).
func allFormulations() []formulation {
	var out []formulation
	for i := range 64 {
		out = append(out, formulation{writtenGELU: i&1 != 0, stackedProjections: i&2 != 0, addMMResidual: i&4 != 0, fusedLoss: i&8 != 0,
			writtenProjectionVJPs: i&16 != 0, float32Gather: i&32 != 0})
	}
	return out
}
