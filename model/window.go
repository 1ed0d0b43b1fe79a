package model

import (
	"fmt"
	"math"

	"github.com/posttrainllm/posttrainllm/mlx"
)

// LayerWindow is how many of the most recent positions, its own included,
// a query of layer l attends to: SlidingWindow on a sliding layer, 0 (every
// earlier position) on a global one. Generation engines use it to bound
// the keys a layer's decoding step reads.
func (c Config) LayerWindow(l int) int {
	if c.SlidingWindow <= 0 || c.SlidingPattern > 0 && (l+1)%c.SlidingPattern == 0 {
		return 0
	}
	return c.SlidingWindow
}

// validateWindow reports sliding-window, post-norm and attention-scale
// fields that are out of range or set without what they need.
func (c Config) validateWindow() error {
	finite := func(v float64) bool { return v >= 0 && !math.IsInf(v, 0) && !math.IsNaN(v) }
	switch {
	case c.SlidingWindow < 0:
		return fmt.Errorf("model config: sliding_window = %d, want >= 0 (0: no sliding window)", c.SlidingWindow)
	case c.SlidingPattern < 0:
		return fmt.Errorf("model config: sliding_pattern = %d, want >= 0 (0: every layer sliding)", c.SlidingPattern)
	case c.SlidingPattern > 0 && c.SlidingWindow == 0:
		return fmt.Errorf("model config: sliding_pattern = %d needs a sliding_window", c.SlidingPattern)
	case !finite(c.RoPELocalBase):
		return fmt.Errorf("model config: rope_local_base = %g, want a finite value >= 0", c.RoPELocalBase)
	case c.RoPELocalBase != 0 && c.SlidingWindow == 0:
		return fmt.Errorf("model config: rope_local_base = %g needs a sliding_window", c.RoPELocalBase)
	case c.RoPELocalBase != 0 && c.learnedPositions():
		return fmt.Errorf("model config: rope_local_base = %g needs positions %q", c.RoPELocalBase, PositionsRoPE)
	case !finite(c.QueryScale):
		return fmt.Errorf("model config: query_scale = %g, want a finite value >= 0 (0: head_dim)", c.QueryScale)
	case c.PostNorms && c.Norm == NormLayer:
		return fmt.Errorf("model config: post_norms needs norm %q", NormRMS)
	}
	return nil
}

// attentionScale is the factor attention scores are multiplied by.
func (c Config) attentionScale() float32 {
	if c.QueryScale > 0 {
		return float32(1 / math.Sqrt(c.QueryScale))
	}
	return float32(1 / math.Sqrt(float64(c.HeadDim())))
}

// forLayer is the rotation of layer l: r, or on a sliding layer of a
// config with RoPELocalBase the unscaled rotation of that base.
func (r rotary) forLayer(c Config, l int) rotary {
	if !r.on || c.RoPELocalBase == 0 || c.LayerWindow(l) == 0 {
		return r
	}
	return rotary{on: true, dims: r.dims, base: float32(c.RoPELocalBase), scale: 1, offset: r.offset, rows: r.rows}
}

// windowed restricts attention of T queries, the last T of the S
// positions of keys k and values v [B, KV, S, HeadDim], to the window
// most recent positions of each. It returns the keys, values and mask to
// attend with: unchanged where no query reaches back a window; for one
// query (decoding) the last window keys and values, unmasked; otherwise
// mask and maskArr (nil, or a boolean [B, 1, T, S] mask) joined with the
// window's boolean mask [T, S].
func windowed(k, v *mlx.Array, mask mlx.AttentionMask, maskArr *mlx.Array, T, window int) (*mlx.Array, *mlx.Array, mlx.AttentionMask, *mlx.Array) {
	S := k.Dim(2)
	if S <= window {
		return k, v, mask, maskArr
	}
	if T == 1 {
		s := k.Shape()
		start, stop := []int{0, 0, S - window, 0}, []int{s[0], s[1], S, s[3]}
		return mlx.Slice(k, start, stop), mlx.Slice(v, start, stop), mlx.NoMask, nil
	}
	q := mlx.ExpandDims(mlx.Arange(float64(S-T), float64(S), 1, mlx.Int32), 1) // [T, 1] absolute positions
	p := mlx.ExpandDims(mlx.Arange(0, float64(S), 1, mlx.Int32), 0)            // [1, S]
	near := mlx.Less(mlx.Subtract(q, p), mlx.Scalar(float64(window), mlx.Int32))
	allowed := mlx.LogicalAnd(mlx.GreaterEqual(q, p), near) // causal and within the window
	if maskArr != nil {
		allowed = mlx.LogicalAnd(maskArr, allowed)
	}
	return k, v, mlx.NoMask, allowed
}
