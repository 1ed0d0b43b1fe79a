package model

import (
	"fmt"

	"github.com/posttrainllm/posttrainllm/mlx"
)

// SlotCache holds the keys and values of a batch of sequences of different
// lengths, for batched generation: each layer's keys and values are
// [Slots, KVHeads, Capacity, HeadDim] in the compute dtype, slot s holding
// one sequence's positions 0…n−1 after rotary positions, whatever the
// other slots hold. A decode step writes each slot's new position in place
// (DecodeSlots) and a prompt is written into its slot chunk by chunk
// (PrefillSlot), so sequences join and leave the batch without the others'
// keys and values being read again. Which positions of a slot are valid is
// the caller's to track (package generate's engine does).
//
// Its arrays outlive MLX scopes: keep them (Arrays) when a step runs inside
// mlx.Run, and Free the cache when done.
type SlotCache struct {
	Keys, Values []*mlx.Array // per layer
}

// NewSlotCache returns a cache of zeros with slots rows of capacity
// positions each. Call on the MLX thread.
func (m *Transformer) NewSlotCache(slots, capacity int) (*SlotCache, error) {
	c := m.Config
	if slots < 1 || capacity < 1 {
		return nil, fmt.Errorf("model: a slot cache of %d slots × %d positions; want at least 1 of each", slots, capacity)
	}
	shape := []int{slots, c.KVHeadCount(), capacity, c.HeadDim()}
	sc := &SlotCache{Keys: make([]*mlx.Array, c.Layers), Values: make([]*mlx.Array, c.Layers)}
	for l := range sc.Keys {
		sc.Keys[l] = mlx.Zeros(shape, c.ComputeDtype())
		sc.Values[l] = mlx.Zeros(shape, c.ComputeDtype())
	}
	return sc, nil
}

// KVBytesPerToken is what one position of one sequence takes in a key/value
// cache: keys and values of every layer in the compute dtype.
func (c Config) KVBytesPerToken() int {
	return 2 * c.Layers * c.KVHeadCount() * c.HeadDim() * c.ComputeDtype().Size()
}

// Slots is the number of sequences the cache holds.
func (c *SlotCache) Slots() int { return c.Keys[0].Dim(0) }

// Capacity is the most positions a slot holds.
func (c *SlotCache) Capacity() int { return c.Keys[0].Dim(2) }

// Arrays returns the cache's arrays, to keep them out of a closing scope.
func (c *SlotCache) Arrays() []*mlx.Array {
	return append(append([]*mlx.Array(nil), c.Keys...), c.Values...)
}

// Free releases the cache's arrays.
func (c *SlotCache) Free() {
	mlx.Free(c.Arrays()...)
	clear(c.Keys)
	clear(c.Values)
}

// Rearrange replaces the cache by one of len(from) slots and capacity
// positions: new slot i holds old slot from[i] (−1 for an empty one), its
// positions cut or padded with zeros to the new capacity. The engine grows
// the cache as sequences join and lengthen and shrinks it as they leave.
// Call where the cache's arrays are kept, as for PrefillSlot.
func (c *SlotCache) Rearrange(from []int, capacity int) error {
	old := c.Slots()
	for _, s := range from {
		if s < -1 || s >= old {
			return fmt.Errorf("model: slot cache: slot %d of %d", s, old)
		}
	}
	idx := make([]int32, len(from))
	for i, s := range from {
		idx[i] = int32(max(s, 0))
	}
	take := mlx.FromSlice(idx, len(idx))
	defer take.Free()
	var keepRow *mlx.Array // [S, 1, 1, 1]: 1 for a kept slot, 0 for an empty one
	for _, s := range from {
		if s < 0 {
			keep := make([]float32, len(from))
			for i, s := range from {
				if s >= 0 {
					keep[i] = 1
				}
			}
			keepRow = mlx.FromSlice(keep, len(from), 1, 1, 1)
			defer keepRow.Free()
			break
		}
	}
	resize := func(a *mlx.Array) *mlx.Array {
		out := mlx.Take(a, take, 0)
		if keepRow != nil {
			out = mlx.Multiply(out, mlx.AsType(keepRow, a.Dtype()))
		}
		s := out.Shape()
		switch {
		case capacity < s[2]:
			out = mlx.Slice(out, []int{0, 0, 0, 0}, []int{s[0], s[1], capacity, s[3]})
		case capacity > s[2]:
			pad := mlx.Zeros([]int{s[0], s[1], capacity - s[2], s[3]}, a.Dtype())
			out = mlx.Concatenate([]*mlx.Array{out, pad}, 2)
		}
		return out
	}
	for l := range c.Keys {
		k, v := c.Keys[l], c.Values[l]
		c.Keys[l], c.Values[l] = resize(k), resize(v)
		k.Free()
		v.Free()
	}
	return mlx.Eval(c.Arrays()...)
}

// CopySlot writes slot from's first n positions into slot to: sequences
// that share a prompt (K samples of one prompt) read it once and copy it.
// Call where the cache's arrays are kept.
func (c *SlotCache) CopySlot(from, to, n int) {
	if from == to || n == 0 {
		return
	}
	for l := range c.Keys {
		for _, arrs := range [][]*mlx.Array{c.Keys, c.Values} {
			a := arrs[l]
			s := a.Shape()
			row := mlx.Slice(a, []int{from, 0, 0, 0}, []int{from + 1, s[1], n, s[3]})
			arrs[l] = mlx.SliceUpdate(a, row, []int{to, 0, 0, 0}, []int{to + 1, s[1], n, s[3]})
			a.Free()
		}
	}
}

// update replaces layer l's keys by write(keys, k) and its values by
// write(values, v), freeing the old arrays, and returns the new ones.
func (c *SlotCache) update(l int, k, v *mlx.Array, write func(old, src *mlx.Array) *mlx.Array) (keys, values *mlx.Array) {
	oldK, oldV := c.Keys[l], c.Values[l]
	c.Keys[l], c.Values[l] = write(oldK, k), write(oldV, v)
	oldK.Free()
	oldV.Free()
	return c.Keys[l], c.Values[l]
}

// DecodeSlots is one decode step of every slot: tokens [S] (int32), slot
// s's token at position positions[s] ([S], int32), attending to that
// slot's positions before it. span [W] (int32, 0…W−1) bounds what
// attention reads to the first W positions of every slot, W above every
// position (a power of two, say, so that few shapes are traced): the
// capacity beyond is neither read nor masked. It writes the new keys and
// values into the cache's arrays in place of the old ones (which it frees)
// and returns the next-token logits [S, V]. A pure function of its inputs
// (parameters, cache arrays, tokens, positions, span) when the cache's
// arrays are inputs, so it traces into a compiled function; call on the
// MLX thread.
func (m *Transformer) DecodeSlots(params []*mlx.Array, c *SlotCache, tokens, positions, span *mlx.Array) *mlx.Array {
	return m.DecodeSlotsWith(params, nil, c, tokens, positions, span)
}

// DecodeSlotsWith is DecodeSlots with the projections of lin computed by
// their Linears, which see the slots as rows [S, in] in slot order: the
// batched engine applies each slot's own adapter this way.
func (m *Transformer) DecodeSlotsWith(params []*mlx.Array, lin Linears, c *SlotCache, tokens, positions, span *mlx.Array) *mlx.Array {
	S := tokens.Dim(0)
	f := m.formulation()
	if err := m.setLinears(&f, lin); err != nil {
		return mlx.ErrorArray(err)
	}
	store := &slotDecode{c: c, positions: positions, span: span}
	return m.forward(params, mlx.Reshape(tokens, S, 1), store, f)
}

// PrefillSlot feeds tokens [1, T] to slot slot at positions start…
// start+T−1: they attend to the slot's positions before start and
// causally to each other, and their keys and values are written into the
// slot. It returns the logits [T, V] of every position when all is set,
// else of the last one alone, [1, V] (the output projection of the other
// rows is skipped). Call on the MLX thread, where the cache's arrays are
// kept.
func (m *Transformer) PrefillSlot(params []*mlx.Array, c *SlotCache, slot, start int, tokens *mlx.Array, all bool) *mlx.Array {
	return m.PrefillSlotWith(params, nil, c, slot, start, tokens, all)
}

// PrefillSlotWith is PrefillSlot with the projections of lin computed by
// their Linears, which see the chunk's positions as rows [T, in].
func (m *Transformer) PrefillSlotWith(params []*mlx.Array, lin Linears, c *SlotCache, slot, start int, tokens *mlx.Array, all bool) *mlx.Array {
	head := logitsHead
	if !all {
		head = lastRowHead
	}
	f := m.formulation()
	if err := m.setLinears(&f, lin); err != nil {
		return mlx.ErrorArray(err)
	}
	store := &slotPrefill{c: c, slot: slot, offset: start}
	return m.forwardTo(params, tokens, store, f, head)[0]
}

// lastRowHead is logitsHead of the last row of x alone.
func lastRowHead(m *Transformer, f formulation, x, head *mlx.Array) []*mlx.Array {
	n, d := x.Dim(0), x.Dim(1)
	return logitsHead(m, f, mlx.Slice(x, []int{n - 1, 0}, []int{n, d}), head)
}

// rowPositions is each row's positions [B·T] (int32) for rows starting at
// rows [B] and T tokens each.
func rowPositions(rows *mlx.Array, T int) *mlx.Array {
	B := rows.Dim(0)
	steps := mlx.Arange(0, float64(T), 1, mlx.Int32)
	return mlx.Reshape(mlx.Add(mlx.Reshape(rows, B, 1), mlx.Reshape(steps, 1, T)), B*T)
}

// slotDecode is the kvStore of DecodeSlots: one new position per slot,
// written at the slot's own position.
type slotDecode struct {
	c         *SlotCache
	positions *mlx.Array // [S] int32
	span      *mlx.Array // [W] int32: 0…W−1, the positions attention reads
	mask      *mlx.Array // [S, 1, 1, W]: the positions each slot's query sees
}

func (d *slotDecode) check(cfg Config, B, T int) error {
	if len(d.c.Keys) != cfg.Layers {
		return fmt.Errorf("model: slot cache holds %d layers, the model has %d", len(d.c.Keys), cfg.Layers)
	}
	if T != 1 || B != d.c.Slots() || d.positions.Ndim() != 1 || d.positions.Dim(0) != B {
		return fmt.Errorf("model: decode of tokens [%d %d] at positions %v over %d slots; want one token per slot",
			B, T, d.positions.Shape(), d.c.Slots())
	}
	if d.span.Ndim() != 1 || d.span.Dim(0) > d.c.Capacity() {
		return fmt.Errorf("model: decode span %v over a cache of %d positions; want [W] with W at most the capacity", d.span.Shape(), d.c.Capacity())
	}
	return nil
}

func (d *slotDecode) start() (int, *mlx.Array) { return 0, d.positions }

func (d *slotDecode) store(l int, k, v *mlx.Array) (*mlx.Array, *mlx.Array, mlx.AttentionMask, *mlx.Array) {
	S := k.Dim(0)
	at := mlx.BroadcastTo(mlx.Reshape(d.positions, S, 1, 1, 1), k.Shape()...)
	keys, values := d.c.update(l, k, v, func(old, src *mlx.Array) *mlx.Array { return mlx.PutAlongAxis(old, at, src, 2) })
	W := d.span.Dim(0)
	if d.mask == nil {
		d.mask = mlx.LessEqual(mlx.Reshape(d.span, 1, 1, 1, W), mlx.Reshape(d.positions, S, 1, 1, 1))
	}
	read := func(a *mlx.Array) *mlx.Array {
		s := a.Shape()
		if W == s[2] {
			return a
		}
		return mlx.Slice(a, []int{0, 0, 0, 0}, []int{s[0], s[1], W, s[3]})
	}
	return read(keys), read(values), mlx.NoMask, d.mask
}

func (d *slotDecode) advance(int) {}

// rowWindows is a kvStore whose rows sit at positions of their own, so a
// sliding-window layer's mask is its to narrow (windowed assumes keys
// that end at the queries).
type rowWindows interface {
	// windowMask returns mask and maskArr narrowed to the keys within
	// window positions of each query.
	windowMask(mask mlx.AttentionMask, maskArr *mlx.Array, window int) (mlx.AttentionMask, *mlx.Array)
}

// windowMask keeps each slot's query to the last window positions up to
// its own.
func (d *slotDecode) windowMask(_ mlx.AttentionMask, maskArr *mlx.Array, window int) (mlx.AttentionMask, *mlx.Array) {
	S, W := d.positions.Dim(0), d.span.Dim(0)
	lowest := mlx.Subtract(mlx.Reshape(d.positions, S, 1, 1, 1), mlx.Scalar(float64(window), mlx.Int32))
	return mlx.NoMask, mlx.LogicalAnd(maskArr, mlx.Greater(mlx.Reshape(d.span, 1, 1, 1, W), lowest))
}

// slotPrefill is the kvStore of PrefillSlot: a chunk of one slot's
// positions from offset on.
type slotPrefill struct {
	c            *SlotCache
	slot, offset int
}

func (p *slotPrefill) check(cfg Config, B, T int) error {
	if len(p.c.Keys) != cfg.Layers {
		return fmt.Errorf("model: slot cache holds %d layers, the model has %d", len(p.c.Keys), cfg.Layers)
	}
	if B != 1 || p.slot < 0 || p.slot >= p.c.Slots() || p.offset < 0 || p.offset+T > p.c.Capacity() {
		return fmt.Errorf("model: prefill of tokens [%d %d] into slot %d from position %d; the cache has %d slots of %d positions",
			B, T, p.slot, p.offset, p.c.Slots(), p.c.Capacity())
	}
	return nil
}

func (p *slotPrefill) start() (int, *mlx.Array) { return p.offset, nil }

func (p *slotPrefill) store(l int, k, v *mlx.Array) (*mlx.Array, *mlx.Array, mlx.AttentionMask, *mlx.Array) {
	T, s := k.Dim(2), k.Shape()
	keys, values := p.c.update(l, k, v, func(old, src *mlx.Array) *mlx.Array {
		return mlx.SliceUpdate(old, src, []int{p.slot, 0, p.offset, 0}, []int{p.slot + 1, s[1], p.offset + T, s[3]})
	})
	seen := func(a *mlx.Array) *mlx.Array {
		return mlx.Slice(a, []int{p.slot, 0, 0, 0}, []int{p.slot + 1, s[1], p.offset + T, s[3]})
	}
	if T == 1 {
		return seen(keys), seen(values), mlx.NoMask, nil
	}
	return seen(keys), seen(values), mlx.CausalMask, nil
}

func (p *slotPrefill) advance(T int) { p.offset += T }
