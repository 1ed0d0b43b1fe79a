package model

import (
	"fmt"
	"math"
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
)

// String returns the kind's name, e.g. "matrix".
func (k Kind) String() string {
	return [...]string{"embedding", "matrix", "norm", "head"}[k]
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
	d, h, v := c.DModel, c.Hidden(), c.PaddedVocab()
	specs := []ParamSpec{{Name: "tok_embeddings.weight", Shape: []int{v, d}, Kind: Embedding}}
	if c.EmbedNorm {
		specs = append(specs, ParamSpec{Name: "embed_norm.weight", Shape: []int{d}, Kind: Norm})
	}
	for i := 0; i < c.Layers; i++ {
		p := fmt.Sprintf("blocks.%d.", i)
		specs = append(specs,
			ParamSpec{Name: p + "attn_norm.weight", Shape: []int{d}, Kind: Norm},
			ParamSpec{Name: p + "attn.wq.weight", Shape: []int{d, d}, Kind: Matrix},
			ParamSpec{Name: p + "attn.wk.weight", Shape: []int{d, d}, Kind: Matrix},
			ParamSpec{Name: p + "attn.wv.weight", Shape: []int{d, d}, Kind: Matrix},
			ParamSpec{Name: p + "attn.wo.weight", Shape: []int{d, d}, Kind: Matrix, Residual: true},
			ParamSpec{Name: p + "mlp_norm.weight", Shape: []int{d}, Kind: Norm},
			ParamSpec{Name: p + "mlp.w1.weight", Shape: []int{h, d}, Kind: Matrix},
			ParamSpec{Name: p + "mlp.w2.weight", Shape: []int{d, h}, Kind: Matrix, Residual: true},
		)
	}
	specs = append(specs, ParamSpec{Name: "norm.weight", Shape: []int{d}, Kind: Norm})
	if !c.TiedEmbeddings {
		specs = append(specs, ParamSpec{Name: "output.weight", Shape: []int{v, d}, Kind: Head})
	}
	return specs
}

// NumParams counts the model's parameters.
func (c Config) NumParams() int { return int(c.ParamCount()) }

// ParamCount counts the model's parameters from the shapes Specs lays out,
// without building the list, in float64: instant for any configuration,
// and sizes too large for an int (which memory checks must refuse) do not
// overflow.
func (c Config) ParamCount() float64 {
	d, h, v := float64(c.DModel), math.Round(c.MLPRatio*float64(c.DModel)), float64(c.PaddedVocab())
	n := v*d + d // token embeddings, final norm
	if c.EmbedNorm {
		n += d
	}
	n += float64(c.Layers) * (2*d + 4*d*d + 2*d*h) // two norms, wq wk wv wo, w1 w2
	if !c.TiedEmbeddings {
		n += v * d
	}
	return n
}

// FLOPsPerToken estimates training FLOPs per token (forward + backward) as
// 6·N plus attention's 12·L·D·T, as in the PaLM appendix and nanoGPT's MFU.
func (c Config) FLOPsPerToken() float64 {
	n := float64(c.NumParams())
	if c.TiedEmbeddings {
		// The embedding lookup is not a matmul, but the tied head is.
		return 6*n + 12*float64(c.Layers*c.DModel*c.Context)
	}
	n -= float64(c.PaddedVocab() * c.DModel) // embedding lookup is no matmul
	return 6*n + 12*float64(c.Layers*c.DModel*c.Context)
}
