package model

import (
	"math"
	"strings"
	"testing"

	"github.com/posttrainllm/posttrainllm/internal/mlxtest"
	"github.com/posttrainllm/posttrainllm/mlx"
)

// LayerWindow follows the pattern: Gemma 3's five sliding layers before a
// global one, Mistral's window on every layer, none without a window.
func TestLayerWindow(t *testing.T) {
	gemma := Config{SlidingWindow: 512, SlidingPattern: 6}
	for l, want := range []int{512, 512, 512, 512, 512, 0, 512, 512, 512, 512, 512, 0} {
		if got := gemma.LayerWindow(l); got != want {
			t.Errorf("gemma layer %d: window %d, want %d", l, got, want)
		}
	}
	if got := (Config{SlidingWindow: 4096}).LayerWindow(31); got != 4096 {
		t.Errorf("mistral layer 31: window %d, want 4096", got)
	}
	if got := (Config{}).LayerWindow(0); got != 0 {
		t.Errorf("no window: %d, want 0", got)
	}
}

// A sliding window changes exactly the positions that reach back a window
// or more: with the window, the logits of the first `window` positions are
// those of the same model without it, and later ones differ. Both passes
// run with the same parameters and the same local rotary base, so only
// the mask differs.
func TestSlidingWindowBindsPastTheWindow(t *testing.T) {
	for _, name := range []string{"mistral", "gemma3"} {
		c := familyConfigs()[name]
		mlxtest.Run(t, func(t testing.TB) {
			m, err := New(c)
			if err != nil {
				t.Fatal(err)
			}
			params, err := m.Init(5)
			if err != nil {
				t.Fatal(err)
			}
			defer mlx.Free(params...)
			wide := c
			wide.SlidingWindow = c.Context // binds nowhere within the context
			mw, err := New(wide)
			if err != nil {
				t.Fatal(err)
			}
			const T = 12
			seq := tokens(t, 1, T, c.VocabSize, 9)
			got, err := m.Logits(params, seq).Float32s()
			if err != nil {
				t.Fatal(err)
			}
			all, err := mw.Logits(params, seq).Float32s()
			if err != nil {
				t.Fatal(err)
			}
			V := c.PaddedVocab()
			for p := range T {
				diff := 0.0
				for v := range V {
					diff = math.Max(diff, math.Abs(float64(got[p*V+v]-all[p*V+v])))
				}
				if p < c.SlidingWindow && diff != 0 {
					t.Errorf("%s: position %d, inside the window, differs by %g without it", name, p, diff)
				}
				if p >= c.SlidingWindow && diff < 1e-4 {
					t.Errorf("%s: position %d, past the window, differs by only %g without it", name, p, diff)
				}
			}
		})
	}
}

// Through the KV cache a sliding layer keeps a rolling window: fed 40
// tokens one at a time, a Gemma-shaped model with window 4 holds at most
// 12 positions on its sliding layers and all 40 on its global one, and
// every position's logits are those of one uncached pass. Truncating back
// within the kept positions continues correctly; truncating to a position
// whose window was dropped is an error that leaves the cache as it was.
func TestRollingCacheMatchesUncached(t *testing.T) {
	c := familyConfigs()["gemma3"]
	c.Context = 64
	mlxtest.Run(t, func(t testing.TB) {
		m, err := New(c)
		if err != nil {
			t.Fatal(err)
		}
		params, err := m.Init(7)
		if err != nil {
			t.Fatal(err)
		}
		defer mlx.Free(params...)
		const T = 40
		seq := tokens(t, 1, T, c.VocabSize, 3)
		ids, err := seq.Int32s()
		if err != nil {
			t.Fatal(err)
		}
		full, err := m.Logits(params, seq).Float32s()
		if err != nil {
			t.Fatal(err)
		}
		V := c.PaddedVocab()
		check := func(what string, got []float32, pos int) {
			t.Helper()
			for v := range V {
				g, w := got[v], full[pos*V+v]
				if math.Abs(float64(g-w)) > 1e-4*(1+math.Abs(float64(w))) {
					t.Fatalf("%s: position %d logit %d: %g cached, %g uncached", what, pos, v, g, w)
				}
			}
		}
		cache := m.NewKVCache()
		defer cache.Free()
		for p := range T {
			got, err := m.LogitsCached(params, mlx.FromSlice(ids[p:p+1], 1, 1), cache).Float32s()
			if err != nil {
				t.Fatal(err)
			}
			check("one at a time", got, p)
		}
		for l := range c.Layers {
			want := T
			if c.LayerWindow(l) > 0 {
				want = 3 * c.SlidingWindow
			}
			if n := cache.held[l]; n > want || c.LayerWindow(l) == 0 && n != T {
				t.Errorf("layer %d (window %d) holds %d positions, want at most %d", l, c.LayerWindow(l), n, want)
			}
		}
		if err := cache.Truncate(3); err == nil || !strings.Contains(err.Error(), "window") || cache.Offset != T {
			t.Fatalf("truncating to 3 after the window rolled past it: %v, offset %d; want an error and offset %d", err, cache.Offset, T)
		}
		back := T - c.SlidingWindow
		if err := cache.Truncate(back); err != nil {
			t.Fatal(err)
		}
		got, err := m.LogitsCached(params, mlx.FromSlice(ids[back:back+2], 1, 2), cache).Float32s()
		if err != nil {
			t.Fatal(err)
		}
		check("after truncation", got[:V], back)
		check("after truncation", got[V:], back+1)
	})
}
