package model

import (
	"math"
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
