package model

import (
	"fmt"
	"math"
)

// Values of the family-level Config fields. The empty string is always the
// first (TinyGPT's) choice.
const (
	NormRMS          = "rms"
	NormLayer        = "layer"
	PositionsRoPE    = "rope"
	PositionsLearned = "learned"
	MLPGELU          = "gelu"
	MLPSwiGLU        = "swiglu"
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
		{"mlp", c.MLP, []string{MLPGELU, MLPSwiGLU}},
	} {
		if f.v != "" && f.v != f.ok[0] && f.v != f.ok[1] {
			return fmt.Errorf("model config: %s = %q, want %q or %q", f.name, f.v, f.ok[0], f.ok[1])
		}
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

// swiGLU says whether the MLP is gated (SwiGLU) rather than GELU.
func (c Config) swiGLU() bool { return c.MLP == MLPSwiGLU }

// normBias says whether norms carry a bias: LayerNorms of a biased family.
func (c Config) normBias() bool { return c.Bias && c.layerNorm() }

// ropeScale is the factor MLX's RoPE multiplies positions by.
func (c Config) ropeScale() float32 {
	if c.RoPEScale == 0 {
		return 1
	}
	return float32(1 / c.RoPEScale)
}
