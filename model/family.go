package model

import (
	"fmt"
	"math"
	"slices"
)

// Values of the family-level Config fields. The empty string is always the
// first choice, the default TinyGPT family's.
const (
	NormRMS          = "rms"
	NormLayer        = "layer"
	PositionsRoPE    = "rope"
	PositionsLearned = "learned"
	MLPGELU          = "gelu"
	MLPSwiGLU        = "swiglu"
	// MLPGeGLU is the MLP gated by the config's GELU instead of SiLU:
	// (GELU(x·W1ᵀ) ⊙ x·W3ᵀ)·W2ᵀ (Gemma's gelu_pytorch_tanh gate).
	MLPGeGLU = "geglu"
	// RoPELlama3 is Config.RoPEType for Llama 3.1's scaled frequencies.
	RoPELlama3 = "llama3"
)

// validateFamily reports the first family-level field that names no
// supported choice.
func (c Config) validateFamily() error {
	for _, f := range []struct {
		name, v string
		ok      []string
	}{
		{"norm", c.Norm, []string{NormRMS, NormLayer}},
		{"positions", c.Positions, []string{PositionsRoPE, PositionsLearned}},
		{"mlp", c.MLP, []string{MLPGELU, MLPSwiGLU, MLPGeGLU}},
	} {
		if f.v != "" && !slices.Contains(f.ok, f.v) {
			return fmt.Errorf("model config: %s = %q, want one of %q", f.name, f.v, f.ok)
		}
	}
	if err := c.validateWindow(); err != nil {
		return err
	}
	if c.KVHeads < 0 || c.KVHeads > 0 && c.Heads%c.KVHeads != 0 {
		return fmt.Errorf("model config: kv_heads = %d, want 0 (as many as heads) or a divisor of heads %d", c.KVHeads, c.Heads)
	}
	if c.MLPHidden < 0 {
		return fmt.Errorf("model config: mlp_hidden = %d, want >= 0 (0: mlp_ratio·d_model)", c.MLPHidden)
	}
	if c.RoPEScale < 0 || math.IsNaN(c.RoPEScale) || math.IsInf(c.RoPEScale, 0) {
		return fmt.Errorf("model config: rope_scale = %g, want a finite value >= 0", c.RoPEScale)
	}
	return c.validateRoPEType()
}

// validateRoPEType reports Llama 3 rope fields that are out of range, or
// set without rope_type llama3.
func (c Config) validateRoPEType() error {
	switch c.RoPEType {
	case "":
		for _, f := range []struct {
			name string
			v    float64
		}{{"rope_factor", c.RoPEFactor}, {"rope_low_freq_factor", c.RoPELowFreqFactor},
			{"rope_high_freq_factor", c.RoPEHighFreqFactor}, {"rope_original_context", float64(c.RoPEOriginalContext)}} {
			if f.v != 0 {
				return fmt.Errorf("model config: %s = %g needs rope_type %q", f.name, f.v, RoPELlama3)
			}
		}
		return nil
	case RoPELlama3:
	default:
		return fmt.Errorf("model config: rope_type = %q, want \"\" (unscaled or linear rope_scale) or %q", c.RoPEType, RoPELlama3)
	}
	finite := func(v float64) bool { return v > 0 && !math.IsInf(v, 0) }
	switch {
	case c.learnedPositions():
		return fmt.Errorf("model config: rope_type %q needs positions %q", c.RoPEType, PositionsRoPE)
	case c.RoPEScale != 0 && c.RoPEScale != 1:
		return fmt.Errorf("model config: rope_scale = %g with rope_type %q; want one scaling, not both", c.RoPEScale, c.RoPEType)
	case !finite(c.RoPEFactor):
		return fmt.Errorf("model config: rope_factor = %g, want a finite value > 0", c.RoPEFactor)
	case !finite(c.RoPELowFreqFactor):
		return fmt.Errorf("model config: rope_low_freq_factor = %g, want a finite value > 0", c.RoPELowFreqFactor)
	case !finite(c.RoPEHighFreqFactor) || c.RoPEHighFreqFactor <= c.RoPELowFreqFactor:
		return fmt.Errorf("model config: rope_high_freq_factor = %g, want a finite value > rope_low_freq_factor %g",
			c.RoPEHighFreqFactor, c.RoPELowFreqFactor)
	case c.RoPEOriginalContext <= 0:
		return fmt.Errorf("model config: rope_original_context = %d, want > 0", c.RoPEOriginalContext)
	}
	return nil
}

// KVHeadCount is the number of key/value heads: KVHeads, or Heads when it
// is 0.
func (c Config) KVHeadCount() int {
	if c.KVHeads > 0 {
		return c.KVHeads
	}
	return c.Heads
}

// layerNorm says whether norms are LayerNorm rather than RMSNorm.
func (c Config) layerNorm() bool { return c.Norm == NormLayer }

// learnedPositions says whether positions are a learned table rather than
// rotary.
func (c Config) learnedPositions() bool { return c.Positions == PositionsLearned }

// swiGLU says whether the MLP is gated by SiLU (SwiGLU).
func (c Config) swiGLU() bool { return c.MLP == MLPSwiGLU }

// gated says whether the MLP is gated (SwiGLU or GeGLU), with a third
// projection w3.
func (c Config) gated() bool { return c.MLP == MLPSwiGLU || c.MLP == MLPGeGLU }

// normBias says whether norms carry a bias: LayerNorms of a biased family.
func (c Config) normBias() bool { return c.Bias && c.layerNorm() }

// qkvBias says whether the q, k and v projections carry biases.
func (c Config) qkvBias() bool { return c.Bias || c.QKVBias }

// outBias says whether attention's output projection carries a bias.
func (c Config) outBias() bool { return c.Bias || c.OutBias }

// qDim is the width of the q projection: Heads·HeadDim.
func (c Config) qDim() int { return c.Heads * c.HeadDim() }

// ropeScale is the factor MLX's RoPE multiplies positions by.
func (c Config) ropeScale() float32 {
	if c.RoPEScale == 0 {
		return 1
	}
	return float32(1 / c.RoPEScale)
}
