package model

import (
	"fmt"
	"math"

	"github.com/posttrainllm/posttrainllm/mlx"
)

// Transformer is a validated Config with its parameter layout. Its methods are
// pure functions of the parameter list, so they trace into compiled steps.
type Transformer struct {
	Config Config
	Specs  []ParamSpec
	// Memory trades compute for memory in Loss, LossTerms and their
	// gradients without changing their values; the zero value keeps every
	// activation.
	Memory Memory
}

// New fills defaults into cfg, validates it and lays out the parameters.
func New(cfg Config) (*Transformer, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Transformer{Config: cfg, Specs: cfg.Specs()}, nil
}

// block is one transformer block's weights; biases and w3 are nil where
// the family has none.
type block struct {
	attnNorm, attnNormB, wq, wk, wv, wo, mlpNorm, mlpNormB, w1, w2, w3 *mlx.Array
	bq, bk, bv, bo, b1, b2, b3                                         *mlx.Array
	// qNorm and kNorm are the per-head RMSNorm gains of q and k
	// (Config.QKNorm), nil without.
	qNorm, kNorm *mlx.Array
	// attnPost and mlpPost are the gains of the norms of attention's and
	// the MLP's outputs (Config.PostNorms), nil without.
	attnPost, mlpPost *mlx.Array
	// wqkv is [wq; wk; wv], [D + 2·KV, D], when the caller passed the
	// three stacked (Config.QKVRuns); wq, wk and wv are nil then.
	wqkv *mlx.Array
}

// weights is the flat parameter list viewed by name, cast to the compute
// dtype when parameters are float32 masters.
type weights struct {
	tokEmb, posEmb, embedNorm, embedNormB *mlx.Array
	blocks                                []block
	norm, normB, head                     *mlx.Array
	// flat is the parameter list as the blocks hold it (cast where
	// unpack cast), indexed like Specs.
	flat []*mlx.Array
}

func (m *Transformer) unpack(params []*mlx.Array) (weights, error) {
	if len(params) != len(m.Specs) {
		return weights{}, fmt.Errorf("model: got %d parameter arrays, the config needs %d", len(params), len(m.Specs))
	}
	p := params
	if m.Config.MasterFP32 && m.Config.ComputeDtype() != mlx.Float32 {
		p = make([]*mlx.Array, len(params))
		for i, a := range params {
			if a != nil {
				p[i] = mlx.AsType(a, m.Config.ComputeDtype())
			}
		}
	}
	c := m.Config
	var w weights
	i, stackedNils := 0, 0
	next := func() *mlx.Array { i++; return p[i-1] }
	// Specs' order: each weight, then its bias where the family has one.
	norm := func(g, b **mlx.Array) {
		*g = next()
		if c.normBias() {
			*b = next()
		}
	}
	linear := func(wt, b **mlx.Array, biased bool) {
		*wt = next()
		if biased {
			*b = next()
		}
	}
	w.tokEmb = next()
	if c.learnedPositions() {
		w.posEmb = next()
	}
	if c.EmbedNorm {
		norm(&w.embedNorm, &w.embedNormB)
	}
	w.blocks = make([]block, c.Layers)
	for l := range w.blocks {
		b := &w.blocks[l]
		norm(&b.attnNorm, &b.attnNormB)
		linear(&b.wq, &b.bq, c.qkvBias())
		linear(&b.wk, &b.bk, c.qkvBias())
		linear(&b.wv, &b.bv, c.qkvBias())
		if b.wk == nil && b.wv == nil && b.wq != nil {
			stackedNils += 2
			if rows := c.qDim() + 2*c.KVHeadCount()*c.HeadDim(); b.wq.Ndim() != 2 || b.wq.Dim(0) != rows || c.qkvBias() {
				return weights{}, fmt.Errorf("model: layer %d: wq is %v with wk and wv nil, want the three stacked, [%d %d] (QKVRuns)",
					l, b.wq.Shape(), rows, c.DModel)
			}
			b.wqkv, b.wq = b.wq, nil
		}
		if c.QKNorm {
			b.qNorm, b.kNorm = next(), next()
		}
		linear(&b.wo, &b.bo, c.outBias())
		if c.PostNorms {
			b.attnPost = next()
		}
		norm(&b.mlpNorm, &b.mlpNormB)
		linear(&b.w1, &b.b1, c.Bias)
		if c.gated() {
			linear(&b.w3, &b.b3, c.Bias)
		}
		linear(&b.w2, &b.b2, c.Bias)
		if c.PostNorms {
			b.mlpPost = next()
		}
	}
	norm(&w.norm, &w.normB)
	w.head = w.tokEmb
	if !c.TiedEmbeddings {
		w.head = next()
	}
	// Only the wk and wv slots of stacked layers may be nil.
	nils := 0
	for _, a := range p {
		if a == nil {
			nils++
		}
	}
	if nils != stackedNils {
		return weights{}, fmt.Errorf("model: %d parameter arrays are nil, want none but wk and wv where wq holds the three stacked", nils)
	}
	w.flat = p
	return w, nil
}

// norm is the family's normalisation of the last axis: RMSNorm with gain g,
// or LayerNorm with gain g and bias b (nil for none). RMSNorm runs through
// k's kernel where k has one for rows like x.
func (m *Transformer) norm(k kernels, x, g, b *mlx.Array) *mlx.Array {
	eps := float32(m.Config.NormEps)
	if m.Config.layerNorm() {
		return mlx.LayerNorm(x, g, b, eps)
	}
	if k.useNorm(x) {
		return k.applyNorm(x, g)
	}
	return mlx.RMSNorm(x, g, eps)
}

// normRes is norm of x and x itself, the residual stream around the block
// the norm feeds. Where k's norm kernel takes x, x comes back through the
// kernel's operation, whose backward pass adds the residual's gradient to
// the norm's (kernels.applyNormRes); otherwise it is x as it was.
func (m *Transformer) normRes(k kernels, x, g, b *mlx.Array) (normed, res *mlx.Array) {
	if k.useNorm(x) { // the kernels hold a norm only for RMSNorm
		return k.applyNormRes(x, g)
	}
	return m.norm(k, x, g, b), x
}

// Logits maps tokens [B, T] (int32) to next-token logits [B, T, V] in the
// compute dtype, V being PaddedVocab; logits of the padding rows are −∞.
// Like Loss and Init it builds its graph on the MLX thread (mlx.Do), so it
// may be called from any goroutine.
func (m *Transformer) Logits(params []*mlx.Array, tokens *mlx.Array) *mlx.Array {
	var out *mlx.Array
	mlx.Do(func() error {
		logits := m.rowLogits(params, tokens, m.formulation())
		if out = logits; logits.Err() == nil {
			out = mlx.Reshape(logits, tokens.Dim(0), tokens.Dim(1), logits.Dim(-1))
		}
		return nil
	})
	return out
}

// rowLogits is Logits over the flattened positions, [B·T, V], written in
// formulation f.
//
// The blocks keep the residual stream as [B·T, D] rows, the shape every
// matmul, norm and elementwise op sees anyway; only attention views it as
// heads. A batch axis would add reshapes around every projection, forward
// and backward, and each graph node is host work in every step
// (docs/performance/gpu.md).
func (m *Transformer) rowLogits(params []*mlx.Array, tokens *mlx.Array, f formulation) *mlx.Array {
	return m.forward(params, tokens, nil, f)
}

// forward is rowLogits continuing the positions held in cache (nil for
// none): the tokens sit at positions cache.Offset…, attend to the cached
// keys and values as well as their own, and cache takes theirs.
func (m *Transformer) forward(params []*mlx.Array, tokens *mlx.Array, cache kvStore, f formulation) *mlx.Array {
	return m.forwardTo(params, tokens, cache, f, logitsHead)[0]
}

// forwardTo runs the model up to its final norm and hands the rows
// [B·T, D], with the output projection's weight, to head, whose outputs it
// returns (one array carrying the error on failure).
func (m *Transformer) forwardTo(params []*mlx.Array, tokens *mlx.Array, cache kvStore, f formulation, head headFunc) []*mlx.Array {
	fail := func(err error) []*mlx.Array { return []*mlx.Array{mlx.ErrorArray(err), mlx.ErrorArray(err)} }
	if err := tokens.Err(); err != nil {
		return fail(err)
	}
	if tokens.Ndim() != 2 {
		return fail(fmt.Errorf("model: tokens have shape %v, want [batch, time]", tokens.Shape()))
	}
	B, T := tokens.Dim(0), tokens.Dim(1)
	w, err := m.unpack(params)
	if err != nil {
		return fail(err)
	}
	c := m.Config
	offset, rows := 0, (*mlx.Array)(nil) // the first position, or each row's
	if cache != nil {
		if err := cache.check(c, B, T); err != nil {
			return fail(err)
		}
		offset, rows = cache.start()
	}
	var gelu activation
	if !c.swiGLU() { // the GELU MLP and GeGLU's gate
		if gelu, err = newGELU(c.GELU, f.writtenGELU); err != nil {
			return fail(err)
		}
		defer gelu.Free()
	}
	ks, err := m.newKernels(f, B, T, cache != nil)
	if err != nil {
		return fail(err)
	}
	defer ks.Free()
	// Generation with a KV cache takes no gradients, so stacking the
	// projections would only concatenate their weights in every pass (the
	// MLP's at every token) to run the same number of products.
	if cache != nil {
		f.stackedProjections, f.stackedGiven = false, true
	}
	if f.proj, err = newProjections(f.writtenProjectionVJPs && cache == nil); err != nil {
		return fail(err)
	}
	defer f.proj.Free()
	f = f.withLinears(w.flat)
	rot := m.newRotary(offset, rows)
	x := f.tokenRows(w.tokEmb, mlx.Reshape(tokens, B*T), cache == nil, c.ComputeDtype()) // [B·T, D]
	if f.seg != nil && cache == nil {
		f.docMask = documentMask(f.seg)
		if w.posEmb != nil {
			x = mlx.Add(x, mlx.Take(w.posEmb, documentPositions(f.seg), 0))
		}
	} else if w.posEmb != nil && rows != nil {
		x = mlx.Add(x, mlx.Take(w.posEmb, rowPositions(rows, T), 0))
	} else if w.posEmb != nil {
		if offset+T > c.Context {
			return fail(fmt.Errorf("model: positions up to %d, the learned position table holds %d (context)", offset+T, c.Context))
		}
		pos := mlx.Slice(w.posEmb, []int{offset, 0}, []int{offset + T, c.DModel}) // [T, D]
		x = mlx.Reshape(mlx.Add(mlx.Reshape(x, B, T, c.DModel), pos), B*T, c.DModel)
	}
	if c.EmbedScale {
		x = mlx.Multiply(x, mlx.AsType(mlx.Scalar(float64(float32(math.Sqrt(float64(c.DModel)))), mlx.Float32), c.ComputeDtype()))
	}
	if w.embedNorm != nil {
		x = m.norm(ks, x, w.embedNorm, w.embedNormB)
	}
	for l, b := range w.blocks {
		if m.Memory.Checkpoint && cache == nil {
			x = m.checkpointedBlock(f, b, x, B, T, l)
			continue
		}
		x = m.block(f, ks, rot, gelu, b, x, B, T, cache, l)
	}
	if cache != nil {
		cache.advance(T)
	}
	x = m.norm(ks, x, w.norm, w.normB)
	return head(m, f, x, w.head)
}

// headFunc is what forwardTo does with the final rows x and the output
// projection's weight: logitsHead, or the chunked loss's terms.
type headFunc func(m *Transformer, f formulation, x, head *mlx.Array) []*mlx.Array

// logitsHead is the output projection: the logits [B·T, V] of rows x.
func logitsHead(m *Transformer, f formulation, x, head *mlx.Array) []*mlx.Array {
	c := m.Config
	if pv := c.PaddedVocab(); pv > c.VocabSize {
		// The −∞ of the padding rows is a bias of the GEMM (its epilogue on a GPU).
		return []*mlx.Array{f.proj.addLinear(paddingBias(c.VocabSize, pv, c.ComputeDtype()), x, head)}
	}
	return []*mlx.Array{f.proj.linear(x, head, nil)}
}

// block is transformer block l applied to the residual stream x [B·T, D].
func (m *Transformer) block(f formulation, ks kernels, rot rotary, gelu activation, b block, x *mlx.Array, B, T int, cache kvStore, l int) *mlx.Array {
	h, res := m.normRes(ks, x, b.attnNorm, b.attnNormB)
	x = m.joinResidual(f, ks, res, m.attention(f, ks, rot.forLayer(m.Config, l), b, h, B, T, cache, l), b.wo, b.bo, b.attnPost)
	h, res = m.normRes(ks, x, b.mlpNorm, b.mlpNormB)
	return m.joinResidual(f, ks, res, m.mlp(f, gelu, b, h), b.w2, b.b2, b.mlpPost)
}

// joinResidual is res + h·wᵀ + bias, or with a post-norm gain post
// (Config.PostNorms) res + RMSNorm(h·wᵀ + bias)·post.
func (m *Transformer) joinResidual(f formulation, ks kernels, res, h, w, bias, post *mlx.Array) *mlx.Array {
	if post == nil {
		return f.residualBias(res, h, w, bias)
	}
	return mlx.Add(res, m.norm(ks, f.proj.linear(h, w, bias), post, nil))
}

// paddingBias is the [pv] bias of the output projection: 0 for the v real
// rows, −∞ for the padding rows. It is built as bytes in dtype (float32,
// bfloat16 or float16), so the graph holds a constant rather than a cast
// that would run every step.
func paddingBias(v, pv int, dtype mlx.Dtype) *mlx.Array {
	negInf := math.Float32bits(float32(math.Inf(-1))) // float32; bfloat16 is its top half
	switch dtype {
	case mlx.BFloat16:
		negInf >>= 16
	case mlx.Float16:
		negInf = 0xFC00
	}
	size := dtype.Size()
	b := make([]byte, pv*size)
	for i := v; i < pv; i++ {
		for k := range size {
			b[i*size+k] = byte(negInf >> (8 * k))
		}
	}
	return mlx.FromBytes(b, dtype, pv)
}

// attention is causal multi-head self-attention over rows x [B·T, D],
// with rotary positions rot unless the family learns absolute ones; it
// returns the heads merged back into rows [B·T, Heads·HeadDim], before the
// output projection wo,
// which the caller applies together with the residual add. With a cache,
// the rows continue the cached positions and layer l's keys and values join
// the cache. With fewer key/value heads than query heads (grouped-query
// attention) each key/value head serves Heads/KVHeads query heads; MLX's
// fused kernel takes them as they are. With QKNorm every head of q and k
// is RMS-normalised (gains b.qNorm, b.kNorm) before its rotation.
//
// The q, k and v projections are f.qkv: on a GPU one matmul against the
// three weights stacked into [D + 2·KV, D], split afterwards; on the CPU
// three matmuls. The parameters stay separate (wq, wk, wv) either way, so
// checkpoints are unchanged. On a CUDA GPU, without a cache, one kernel of
// ks splits the stacked projection into heads and rotates q and k
// (kernels.go) in place of the split, the head views and MLX's RoPE.
func (m *Transformer) attention(f formulation, ks kernels, rot rotary, b block, x *mlx.Array, B, T int, cache kvStore, l int) *mlx.Array {
	c := m.Config
	hd, kvh := c.HeadDim(), c.KVHeadCount()
	heads := func(t *mlx.Array, h int) *mlx.Array { // [B·T, h·hd] -> [B, h, T, hd]
		return mlx.Transpose(mlx.Reshape(t, B, T, h, hd), 0, 2, 1, 3)
	}
	var q, k, v *mlx.Array
	if f.stackedFor(b) && ks.useHeads(x) {
		q, k, v = ks.applyHeads(f.qkvRows(b, x)) // split, rotated and laid out as heads by one kernel
	} else {
		q, k, v = f.qkv(b, x, c.qDim(), kvh*hd)
		q, k, v = heads(q, c.Heads), heads(k, kvh), heads(v, kvh)
		if b.qNorm != nil {
			eps := float32(c.NormEps)
			q, k = mlx.RMSNorm(q, b.qNorm, eps), mlx.RMSNorm(k, b.kNorm, eps)
		}
		q, k = rot.apply(q), rot.apply(k)
	}
	mask, maskArr := mlx.CausalMask, (*mlx.Array)(nil)
	if cache != nil {
		k, v, mask, maskArr = cache.store(l, k, v)
	}
	if f.docMask != nil && cache == nil {
		mask, maskArr = mlx.NoMask, f.docMask // packed examples: causal within each
	}
	if window := c.LayerWindow(l); window > 0 {
		if rows, ok := cache.(rowWindows); ok {
			mask, maskArr = rows.windowMask(mask, maskArr, window)
		} else {
			k, v, mask, maskArr = windowed(k, v, mask, maskArr, T, window)
		}
	}
	o := mlx.ScaledDotProductAttention(q, k, v, c.attentionScale(), mask, maskArr)
	return mlx.Reshape(mlx.Transpose(o, 0, 2, 1, 3), B*T, c.qDim())
}

// mlp is the position-wise feed-forward network up to its hidden
// activations: GELU(x·W1ᵀ + b1), or for SwiGLU SiLU(x·W1ᵀ) ⊙ x·W3ᵀ (GeGLU:
// GELU in place of SiLU), the two projections run as one matmul where the
// formulation stacks projections (or as one grouped Linear). The caller applies the down projection w2 together
// with the residual add. gelu is the family's GELU (unused by SwiGLU).
func (m *Transformer) mlp(f formulation, gelu activation, b block, x *mlx.Array) *mlx.Array {
	if !m.Config.gated() {
		return gelu.apply(f.proj.linear(x, b.w1, b.b1))
	}
	gate := silu
	if !m.Config.swiGLU() {
		gate = gelu.apply
	}
	var rows *mlx.Array // [x·W1ᵀ + b1, x·W3ᵀ + b3]
	switch l13, grouped := f.proj.grouped(b.w1); {
	case grouped:
		rows = addBias(l13.apply(x), b.bias13())
	case !f.stackedProjections || f.proj.replaced(b.w1) || f.proj.replaced(b.w3):
		return mlx.Multiply(gate(f.proj.linear(x, b.w1, b.b1)), f.proj.linear(x, b.w3, b.b3))
	default:
		rows = f.proj.linear(x, mlx.Concatenate([]*mlx.Array{b.w1, b.w3}, 0), b.bias13())
	}
	gu := mlx.Split(rows, 2, -1)
	return mlx.Multiply(gate(gu[0]), gu[1])
}

// bias13 is SwiGLU's two biases [b1; b3] stacked as its two projections
// are, or nil without biases.
func (b block) bias13() *mlx.Array {
	if b.b1 == nil {
		return nil
	}
	return mlx.Concatenate([]*mlx.Array{b.b1, b.b3}, 0)
}

// silu is x·σ(x), the gate of SwiGLU.
func silu(x *mlx.Array) *mlx.Array { return mlx.Multiply(x, mlx.Sigmoid(x)) }

// Init returns freshly initialised parameters in Specs order: norms at one,
// biases at zero, everything else N(0, InitStd²), residual projections scaled by 1/√(2·layers).
// The same seed gives the same parameters.
func (m *Transformer) Init(seed uint64) ([]*mlx.Array, error) {
	var params []*mlx.Array
	err := mlx.Do(func() error {
		var err error
		params, err = m.init(seed)
		return err
	})
	return params, err
}

// init is Init on the MLX thread.
func (m *Transformer) init(seed uint64) ([]*mlx.Array, error) {
	c := m.Config
	s := mlx.NewScope()
	defer s.Close()
	keys := mlx.RandomSplit(mlx.RandomKey(seed), len(m.Specs))
	params := make([]*mlx.Array, len(m.Specs))
	for i, spec := range m.Specs {
		if spec.Kind == Norm {
			params[i] = mlx.Ones(spec.Shape, c.ParamDtype())
			continue
		}
		if spec.Kind == Bias {
			params[i] = mlx.Zeros(spec.Shape, c.ParamDtype())
			continue
		}
		std := c.InitStd
		if spec.Residual {
			std /= math.Sqrt(2 * float64(c.Layers))
		}
		params[i] = mlx.AsType(mlx.RandomNormal(spec.Shape, mlx.Float32, 0, float32(std), keys[i]), c.ParamDtype())
	}
	if err := mlx.Eval(params...); err != nil {
		return nil, fmt.Errorf("model: init: %w", err)
	}
	s.Keep(params...)
	return params, nil
}
