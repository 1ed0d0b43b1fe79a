package model

import (
	"math"

	"github.com/posttrainllm/posttrainllm/mlx"
)

// rotary applies the model's rotary positions to heads [B, h, T, HeadDim]
// whose first position is offset: MLX's RoPE (rotate-half convention) with
// the config's base and linear scale, or with Llama 3's scaled frequencies
// passed as periods. The zero rotary, for learned positions, returns heads
// as they are.
type rotary struct {
	on          bool
	dims        int
	base, scale float32
	periods     *mlx.Array // [HeadDim/2], Llama 3's; nil for the base's
	offset      int
	// rows, when not nil, holds each batch row's first position [B]
	// (int32) in place of offset: rows of a batched decode sit at
	// positions of their own.
	rows *mlx.Array
}

// newRotary returns the rotation of m's config for positions from offset,
// or from rows' positions, one per batch row, when rows is not nil.
func (m *Transformer) newRotary(offset int, rows *mlx.Array) rotary {
	c := m.Config
	if c.learnedPositions() {
		return rotary{}
	}
	r := rotary{on: true, dims: c.HeadDim(), base: float32(c.RoPEBase), scale: c.ropeScale(), offset: offset, rows: rows}
	if inv := c.ropeInvFreqs(); inv != nil {
		periods := make([]float32, len(inv))
		for i, f := range inv {
			periods[i] = float32(1 / f)
		}
		r.periods = mlx.FromSlice(periods, len(periods))
	}
	return r
}

// apply rotates heads t.
func (r rotary) apply(t *mlx.Array) *mlx.Array {
	switch {
	case !r.on:
		return t
	case r.rows != nil:
		return mlx.RoPERows(t, r.dims, false, r.base, r.scale, r.rows, r.periods)
	case r.periods != nil:
		return mlx.RoPEFreqs(t, r.dims, false, r.periods, r.scale, r.offset)
	}
	return mlx.RoPE(t, r.dims, false, r.base, r.scale, r.offset)
}

// ropeInvFreqs returns the angular frequency of each rotated pair where
// the config scales them (RoPEType llama3), nil where MLX's RoPE derives
// them from the base. Llama 3's scheme, as transformers computes it
// (_compute_llama3_parameters): from the base's frequencies
// f_i = base^(−2i/HeadDim) with wavelengths w_i = 2π/f_i, those with
// w_i > original/low_freq_factor are divided by factor, those with
// w_i < original/high_freq_factor are kept, and those between are
// s·f_i + (1 − s)·f_i/factor with s = (original/w_i − low_freq_factor) /
// (high_freq_factor − low_freq_factor).
func (c Config) ropeInvFreqs() []float64 {
	if c.RoPEType != RoPELlama3 {
		return nil
	}
	hd := c.HeadDim()
	orig := float64(c.RoPEOriginalContext)
	lowWave, highWave := orig/c.RoPELowFreqFactor, orig/c.RoPEHighFreqFactor
	out := make([]float64, hd/2)
	for i := range out {
		f := math.Pow(c.RoPEBase, -float64(2*i)/float64(hd))
		wave := 2 * math.Pi / f
		switch {
		case wave > lowWave:
			f /= c.RoPEFactor
		case wave >= highWave:
			s := (orig/wave - c.RoPELowFreqFactor) / (c.RoPEHighFreqFactor - c.RoPELowFreqFactor)
			f = (1-s)*f/c.RoPEFactor + s*f
		}
		out[i] = f
	}
	return out
}
