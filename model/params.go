package model

import (
	"fmt"
	"strings"
)

// Kind says what a parameter is, which decides its initialisation and how
// optimizers treat it (weight decay, Muon).
type Kind int

// Parameter kinds.
const (
	Embedding Kind = iota // token embedding table [PaddedVocab, D]
	Matrix                // a hidden linear layer's weight [out, in]
	Norm                  // an RMSNorm gain [D]
	Head                  // the untied output projection [PaddedVocab, D]
	Bias                  // a projection's or LayerNorm's bias [out]
)

// String returns the kind's name, e.g. "matrix".
func (k Kind) String() string {
	return [...]string{"embedding", "matrix", "norm", "head", "bias"}[k]
}

// ParamSpec names one parameter. Names follow PyTorch/MLX conventions
// (tok_embeddings.weight, blocks.3.attn.wq.weight, …) and linear weights are
// stored [out, in], so a checkpoint maps one-to-one onto an equivalent
// PyTorch or MLX Python model.
type ParamSpec struct {
	Name  string
	Shape []int
	Kind  Kind
	// Residual marks projections into the residual stream (attn.wo, mlp.w2),
	// initialised with std/√(2·layers) as in GPT-2.
	Residual bool
}

// Size is the number of elements.
func (p ParamSpec) Size() int {
	n := 1
	for _, d := range p.Shape {
		n *= d
	}
	return n
}

// Specs lists every parameter in the model's fixed order: the flat order of
// the parameter slices that Forward and Loss take.
func (c Config) Specs() []ParamSpec {
	d, h, v, q := c.DModel, c.Hidden(), c.PaddedVocab(), c.qDim()
	kv := c.KVHeadCount() * c.HeadDim()
	var specs []ParamSpec
	add := func(name string, kind Kind, shape ...int) {
		specs = append(specs, ParamSpec{Name: name, Shape: shape, Kind: kind})
	}
	norm := func(name string) {
		add(name+".weight", Norm, d)
		if c.normBias() {
			add(name+".bias", Bias, d)
		}
	}
	linear := func(name string, residual bool, out, in int, bias bool) {
		add(name+".weight", Matrix, out, in)
		specs[len(specs)-1].Residual = residual
		if bias {
			add(name+".bias", Bias, out)
		}
	}
	add("tok_embeddings.weight", Embedding, v, d)
	if c.learnedPositions() {
		add("pos_embeddings.weight", Embedding, c.Context, d)
	}
	if c.EmbedNorm {
		norm("embed_norm")
	}
	for i := 0; i < c.Layers; i++ {
		p := fmt.Sprintf("blocks.%d.", i)
		norm(p + "attn_norm")
		linear(p+"attn.wq", false, q, d, c.qkvBias())
		linear(p+"attn.wk", false, kv, d, c.qkvBias())
		linear(p+"attn.wv", false, kv, d, c.qkvBias())
		if c.QKNorm {
			add(p+"attn.q_norm.weight", Norm, c.HeadDim())
			add(p+"attn.k_norm.weight", Norm, c.HeadDim())
		}
		linear(p+"attn.wo", true, d, q, c.outBias())
		if c.PostNorms {
			add(p+"attn_post_norm.weight", Norm, d)
		}
		norm(p + "mlp_norm")
		linear(p+"mlp.w1", false, h, d, c.Bias)
		if c.gated() {
			linear(p+"mlp.w3", false, h, d, c.Bias)
		}
		linear(p+"mlp.w2", true, d, h, c.Bias)
		if c.PostNorms {
			add(p+"mlp_post_norm.weight", Norm, d)
		}
	}
	norm("norm")
	if !c.TiedEmbeddings {
		add("output.weight", Head, v, d)
	}
	return specs
}

// QKVRuns returns, per layer, the indices in Specs of its wq, wk and wv
// weights, for a caller that holds each layer's three stacked in one
// [Heads·HeadDim + 2·KV, D] array (rows wq, then wk, then wv: their order in Specs,
// so a flat copy of the parameters holds them that way). Loss, Logits
// and the other pure functions accept that array in wq's slot with nil
// in wk's and wv's. Families with q/k/v biases (not adjacent to their
// weights in Specs) return nil. Transformer.StackedQKV says whether to.
func (c Config) QKVRuns() [][]int {
	if c.qkvBias() {
		return nil
	}
	var out [][]int
	for i, s := range c.Specs() {
		if strings.HasSuffix(s.Name, ".attn.wq.weight") {
			out = append(out, []int{i, i + 1, i + 2})
		}
	}
	return out
}

// NumParams counts the model's parameters.
func (c Config) NumParams() int { return int(c.ParamCount()) }

// ParamCount counts the model's parameters from the shapes Specs lays out,
// without building the list, in float64: instant for any configuration,
// and sizes too large for an int (which memory checks must refuse) do not
// overflow.
func (c Config) ParamCount() float64 {
	d, h, v := float64(c.DModel), float64(c.Hidden()), float64(c.PaddedVocab())
	kv := float64(c.KVHeadCount() * c.HeadDim())
	norm := d // one norm's gain, and its bias if it has one
	if c.normBias() {
		norm = 2 * d
	}
	bias := 0.0 // 1 when projections carry biases
	if c.Bias {
		bias = 1
	}
	n := v*d + norm // token embeddings, final norm
	if c.learnedPositions() {
		n += float64(c.Context) * d
	}
	if c.EmbedNorm {
		n += norm
	}
	q := float64(c.qDim())
	attn := d*q*2 + d*kv*2 // wq wo, wk wv
	if c.qkvBias() {
		attn += q + 2*kv
	}
	if c.outBias() {
		attn += d
	}
	if c.QKNorm {
		attn += 2 * float64(c.HeadDim())
	}
	mlp := (d+bias)*h + (h+bias)*d // w1 w2
	if c.gated() {
		mlp += (d + bias) * h // w3
	}
	if c.PostNorms {
		mlp += 2 * d // attn_post_norm, mlp_post_norm
	}
	n += float64(c.Layers) * (2*norm + attn + mlp)
	if !c.TiedEmbeddings {
		n += v * d
	}
	return n
}

// FLOPsPerToken estimates training FLOPs per token (forward + backward) as
// 6·N plus attention's 12·L·D·T, as in the PaLM appendix and nanoGPT's MFU,
// with D the width of q (Heads·HeadDim, d_model unless head_dim differs).
func (c Config) FLOPsPerToken() float64 {
	n := float64(c.NumParams())
	if c.TiedEmbeddings {
		// The embedding lookup is not a matmul, but the tied head is.
		return 6*n + 12*float64(c.Layers*c.qDim()*c.Context)
	}
	n -= float64(c.PaddedVocab() * c.DModel) // embedding lookup is no matmul
	return 6*n + 12*float64(c.Layers*c.qDim()*c.Context)
}
