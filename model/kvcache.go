package model

import (
	"fmt"

	"github.com/posttrainllm/posttrainllm/mlx"
)

// KVCache holds the keys and values of the positions a model has already
// seen, so generation feeds only each new token instead of the whole
// context again. Keys and values are [B, KVHeads, n, HeadDim] per layer,
// after rotary positions, for the last n positions: all Offset of them on
// a global layer; on a sliding layer (Config.LayerWindow) a rolling window
// that keeps twice the window's positions and drops older ones once it
// holds three times as many (Truncate can go back a window).
//
// Each layer's positions sit at the front of a buffer grown
// kvChunk positions at a time, and a pass writes its keys and values in
// place (mlx.SliceUpdate) and attends to a view of the positions held:
// a decode step copies one position per layer, not the whole cache, and
// no mask is needed (the view ends at the new position).
//
// Its arrays outlive MLX scopes: keep them (Arrays) when a step runs
// inside mlx.Run, and Free the cache when done.
type KVCache struct {
	Offset  int // positions seen
	keys    []*mlx.Array
	values  []*mlx.Array
	held    []int // positions at the front of each layer's buffers
	windows []int // each layer's window, 0 for a global layer
}

// kvChunk is how many positions a KVCache's buffers grow by: a buffer is
// reallocated (its positions copied) once per kvChunk tokens generated.
const kvChunk = 256

// NewKVCache returns an empty cache for m.
func (m *Transformer) NewKVCache() *KVCache {
	L := m.Config.Layers
	c := &KVCache{keys: make([]*mlx.Array, L), values: make([]*mlx.Array, L), held: make([]int, L), windows: make([]int, L)}
	for l := range c.windows {
		c.windows[l] = m.Config.LayerWindow(l)
	}
	return c
}

// LogitsCached is Logits for tokens [B, T] that continue the positions held
// in cache: they attend to the cached keys and values and to each other
// causally, and the cache takes theirs (its Offset grows by T). Its arrays
// replace the old ones, which it frees.
func (m *Transformer) LogitsCached(params []*mlx.Array, tokens *mlx.Array, cache *KVCache) *mlx.Array {
	var out *mlx.Array
	mlx.Do(func() error {
		logits := m.forward(params, tokens, cache, m.formulation())
		if out = logits; logits.Err() == nil {
			out = mlx.Reshape(logits, tokens.Dim(0), tokens.Dim(1), logits.Dim(-1))
		}
		return nil
	})
	return out
}

// Arrays returns the cache's arrays, to keep them out of a closing scope.
func (c *KVCache) Arrays() []*mlx.Array {
	var out []*mlx.Array
	for l := range c.keys {
		if c.keys[l] != nil {
			out = append(out, c.keys[l], c.values[l])
		}
	}
	return out
}

// Free releases the cache's arrays and empties it.
func (c *KVCache) Free() {
	mlx.Free(c.Arrays()...)
	clear(c.keys)
	clear(c.values)
	clear(c.held)
	c.Offset = 0
}

// kvStore is where attention keeps the keys and values of the positions
// a forward pass continues: a KVCache, whose rows share one length, or a
// view of a SlotCache, whose rows have lengths of their own. forwardTo
// asks it for the tokens' positions, hands it each layer's new keys and
// values, and tells it how many positions the pass added.
type kvStore interface {
	// check reports a store that does not fit config cfg and tokens [B, T].
	check(cfg Config, B, T int) error
	// start returns the tokens' first position: one offset for every row,
	// or, when rows is not nil, each row's own ([B], int32).
	start() (offset int, rows *mlx.Array)
	// store takes layer l's new keys and values [B, KVHeads, T, HeadDim]
	// and returns those attention reads with the mask that keeps each
	// query to the positions it may see.
	store(l int, k, v *mlx.Array) (keys, values *mlx.Array, mask mlx.AttentionMask, maskArr *mlx.Array)
	// advance records that the pass added T positions.
	advance(T int)
}

// start is the cache's length: new tokens continue from it.
func (c *KVCache) start() (int, *mlx.Array) { return c.Offset, nil }

// store appends layer l's keys and values. New positions attend causally
// to each other and to every cached one; a single new position sees all.
func (c *KVCache) store(l int, k, v *mlx.Array) (*mlx.Array, *mlx.Array, mlx.AttentionMask, *mlx.Array) {
	T := k.Dim(2)
	k, v = c.append(l, k, v)
	if T == 1 {
		return k, v, mlx.NoMask, nil
	}
	return k, v, mlx.CausalMask, nil
}

// advance grows the cache's length by T.
func (c *KVCache) advance(T int) { c.Offset += T }

// check reports a cache that does not fit config c and batch size B.
func (c *KVCache) check(cfg Config, B, _ int) error {
	if len(c.keys) != cfg.Layers {
		return fmt.Errorf("model: cache holds %d layers, the model has %d", len(c.keys), cfg.Layers)
	}
	if k := c.keys[0]; k != nil && k.Dim(0) != B {
		return fmt.Errorf("model: cache holds batch %d, tokens have batch %d", k.Dim(0), B)
	}
	return nil
}

// append writes layer l's new keys and values [B, KVHeads, T, HeadDim]
// after the positions its buffers hold and returns all of the layer's,
// cached first: the last positions of the sequence, which is all
// attention needs of them. A sliding layer holding more than three times
// its window keeps the last two windows' worth (copied into buffers of
// their own, so the dropped positions' are released).
func (c *KVCache) append(l int, k, v *mlx.Array) (*mlx.Array, *mlx.Array) {
	n, T := c.held[l], k.Dim(2)
	c.keys[l] = writeAt(c.keys[l], k, n)
	c.values[l] = writeAt(c.values[l], v, n)
	n += T
	c.held[l] = n
	k, v = front(c.keys[l], n), front(c.values[l], n)
	if w := c.window(l); w > 0 && n > 3*w {
		oldK, oldV := c.keys[l], c.values[l]
		c.keys[l] = mlx.Copy(mlx.Slice(k, []int{0, 0, n - 2*w, 0}, k.Shape()))
		c.values[l] = mlx.Copy(mlx.Slice(v, []int{0, 0, n - 2*w, 0}, v.Shape()))
		c.held[l] = 2 * w
		oldK.Free()
		oldV.Free()
	}
	return k, v
}

// writeAt returns buf (nil for none yet) with src [B, H, T, D] written at
// positions n…n+T−1, in place when buf has room; otherwise in a new buffer
// of the next multiple of kvChunk positions holding buf's first n, and
// buf is freed.
func writeAt(buf, src *mlx.Array, n int) *mlx.Array {
	s := src.Shape()
	T := s[2]
	if buf == nil || buf.Dim(2) < n+T {
		room := (n + T + kvChunk - 1) / kvChunk * kvChunk
		grown := mlx.Zeros([]int{s[0], s[1], room, s[3]}, src.Dtype())
		if buf != nil {
			grown = mlx.SliceUpdate(grown, front(buf, n), []int{0, 0, 0, 0}, []int{s[0], s[1], n, s[3]})
			buf.Free()
		}
		buf = grown
	}
	out := mlx.SliceUpdate(buf, src, []int{0, 0, n, 0}, []int{s[0], s[1], n + T, s[3]})
	buf.Free()
	return out
}

// front is the first n positions of a buffer [B, H, room, D]: a view, a
// handle of its own even when it is the whole buffer.
func front(buf *mlx.Array, n int) *mlx.Array {
	s := buf.Shape()
	return mlx.Slice(buf, []int{0, 0, 0, 0}, []int{s[0], s[1], n, s[3]})
}

// window is layer l's window, 0 for a global layer (or a cache made
// without windows).
func (c *KVCache) window(l int) int {
	if l < len(c.windows) {
		return c.windows[l]
	}
	return 0
}

// Truncate keeps the first n positions of the cache and drops the rest,
// so generation can continue a conversation from the part of it that is
// unchanged. n must be in [0, Offset]; 0 empties the cache. A sliding
// layer that has dropped positions the window of position n would read
// cannot go back that far: Truncate says so and changes nothing, and the
// caller feeds the sequence again from an empty cache. Call it where the
// cache's arrays are kept (inside mlx.Run, returning Arrays), as for
// LogitsCached.
func (c *KVCache) Truncate(n int) error {
	if n < 0 || n > c.Offset {
		return fmt.Errorf("model: truncate the cache to %d positions: it holds %d", n, c.Offset)
	}
	if n == 0 {
		c.Free()
		return nil
	}
	if n == c.Offset {
		return nil
	}
	for l := range c.keys {
		if c.keys[l] == nil {
			continue
		}
		if dropped := c.Offset - c.held[l]; dropped > 0 && n-dropped < c.window(l) {
			return fmt.Errorf("model: truncate the cache to %d positions: layer %d keeps its last %d of %d (window %d), so position %d's window is gone; feed the sequence again",
				n, l, c.held[l], c.Offset, c.window(l), n)
		}
	}
	// The positions dropped stay in the buffers, to be written over.
	for l := range c.keys {
		if c.keys[l] != nil {
			c.held[l] -= c.Offset - n
		}
	}
	c.Offset = n
	return nil
}
