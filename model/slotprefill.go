package model

import (
	"fmt"

	"github.com/posttrainllm/posttrainllm/mlx"
)

// PrefillSlots feeds a chunk of several slots' prompts in one forward
// pass: row r of tokens [R, C] goes to slot slots[r] at positions
// starts[r]…, its first lengths[r] tokens real and the rest padding (their
// keys and values land past the row's real positions, where its own next
// chunk or decode step writes later). Each row attends to its slot's
// positions before starts[r] and causally within its chunk. It returns the
// logits [R, V] of each row's last real token. Every starts[r]+C must fit
// the cache's capacity. Call on the MLX thread, where the cache's arrays
// are kept.
func (m *Transformer) PrefillSlots(params []*mlx.Array, c *SlotCache, slots, starts, lengths []int, tokens *mlx.Array) *mlx.Array {
	return m.PrefillSlotsWith(params, nil, c, slots, starts, lengths, tokens)
}

// PrefillSlotsWith is PrefillSlots with the projections of lin computed
// by their Linears, which see the chunks as rows [R·C, in], row r's C
// positions at rows r·C…r·C+C−1.
func (m *Transformer) PrefillSlotsWith(params []*mlx.Array, lin Linears, c *SlotCache, slots, starts, lengths []int, tokens *mlx.Array) *mlx.Array {
	R, C := tokens.Dim(0), tokens.Dim(1)
	if len(slots) != R || len(starts) != R || len(lengths) != R {
		return mlx.ErrorArray(fmt.Errorf("model: prefill of %d rows with %d slots, %d starts and %d lengths", R, len(slots), len(starts), len(lengths)))
	}
	store := &slotPrefillRows{c: c, slots: slots, starts: starts, C: C}
	last := make([]int32, R)
	for r, n := range lengths {
		if n < 1 || n > C {
			return mlx.ErrorArray(fmt.Errorf("model: prefill row %d holds %d real tokens of %d", r, n, C))
		}
		last[r] = int32(r*C + n - 1)
	}
	head := func(m *Transformer, f formulation, x, w *mlx.Array) []*mlx.Array {
		return logitsHead(m, f, mlx.Take(x, mlx.FromSlice(last, R), 0), w)
	}
	f := m.formulation()
	if err := m.setLinears(&f, lin); err != nil {
		return mlx.ErrorArray(err)
	}
	return m.forwardTo(params, tokens, store, f, head)[0]
}

// slotPrefillRows is the kvStore of PrefillSlots.
type slotPrefillRows struct {
	c             *SlotCache
	slots, starts []int
	C             int
	span          int                // positions attention reads: every row's chunk end, rounded up
	take, mask    *mlx.Array         // the rows' slots [R]; the positions each query sees [R, 1, C, span]
	windows       map[int]*mlx.Array // mask narrowed to a sliding window, by its size
}

func (p *slotPrefillRows) check(cfg Config, B, T int) error {
	if len(p.c.Keys) != cfg.Layers {
		return fmt.Errorf("model: slot cache holds %d layers, the model has %d", len(p.c.Keys), cfg.Layers)
	}
	if B != len(p.slots) || T != p.C {
		return fmt.Errorf("model: prefill of tokens [%d %d] for %d rows of %d", B, T, len(p.slots), p.C)
	}
	end := 0
	for r, s := range p.slots {
		if s < 0 || s >= p.c.Slots() || p.starts[r] < 0 || p.starts[r]+T > p.c.Capacity() {
			return fmt.Errorf("model: prefill of %d tokens into slot %d from position %d; the cache has %d slots of %d positions",
				T, s, p.starts[r], p.c.Slots(), p.c.Capacity())
		}
		end = max(end, p.starts[r]+T)
	}
	p.span = min(p.c.Capacity(), (end+31)/32*32)
	return nil
}

func (p *slotPrefillRows) start() (int, *mlx.Array) {
	rows := make([]int32, len(p.starts))
	for r, s := range p.starts {
		rows[r] = int32(s)
	}
	return 0, mlx.FromSlice(rows, len(rows))
}

func (p *slotPrefillRows) store(l int, k, v *mlx.Array) (*mlx.Array, *mlx.Array, mlx.AttentionMask, *mlx.Array) {
	R, T := len(p.slots), p.C
	if p.take == nil {
		idx := make([]int32, R)
		for r, s := range p.slots {
			idx[r] = int32(s)
		}
		p.take = mlx.FromSlice(idx, R)
		p.mask = p.rowMask(0)
	}
	s := k.Shape()
	keys, values := p.c.update(l, k, v, func(a, src *mlx.Array) *mlx.Array {
		for r, slot := range p.slots {
			row := mlx.Slice(src, []int{r, 0, 0, 0}, []int{r + 1, s[1], T, s[3]})
			next := mlx.SliceUpdate(a, row, []int{slot, 0, p.starts[r], 0}, []int{slot + 1, s[1], p.starts[r] + T, s[3]})
			if r > 0 {
				a.Free() // an intermediate of this layer's writes
			}
			a = next
		}
		return a
	})
	read := func(a *mlx.Array) *mlx.Array {
		return mlx.Slice(mlx.Take(a, p.take, 0), []int{0, 0, 0, 0}, []int{R, s[1], p.span, s[3]})
	}
	return read(keys), read(values), mlx.NoMask, p.mask
}

func (p *slotPrefillRows) advance(int) {}

// rowMask is the [R, 1, C, span] mask of the positions each query sees:
// its slot's up to its own and, with a window, only the last window of
// them.
func (p *slotPrefillRows) rowMask(window int) *mlx.Array {
	R, T := len(p.slots), p.C
	seen := make([]bool, R*T*p.span)
	for r := range p.slots {
		for i := range T {
			q := p.starts[r] + i
			from := 0
			if window > 0 {
				from = max(0, q-window+1)
			}
			for j := from; j <= q && j < p.span; j++ {
				seen[(r*T+i)*p.span+j] = true
			}
		}
	}
	return mlx.FromSlice(seen, R, 1, T, p.span)
}

// windowMask is rowMask of the window, built once per window size.
func (p *slotPrefillRows) windowMask(_ mlx.AttentionMask, _ *mlx.Array, window int) (mlx.AttentionMask, *mlx.Array) {
	if p.windows == nil {
		p.windows = map[int]*mlx.Array{}
	}
	m, ok := p.windows[window]
	if !ok {
		m = p.rowMask(window)
		p.windows[window] = m
	}
	return mlx.NoMask, m
}
