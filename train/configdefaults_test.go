package train

import (
	"math"
	"testing"
)

// --lr keeps the floor's share of the peak; a config without a valid
// ratio takes DefaultMinLRRatio.
func TestWithLRKeepsTheRatio(t *testing.T) {
	c := Config{LR: 3e-3, MinLR: 6e-4}
	if got := c.WithLR(1e-5); got.LR != 1e-5 || math.Abs(got.MinLR-2e-6) > 1e-18 {
		t.Errorf("WithLR(1e-5) of lr 3e-3, min_lr 6e-4: lr %g, min_lr %g; want 1e-05 and 2e-06", got.LR, got.MinLR)
	}
	if got := (Config{LR: 1e-3}).WithLR(1e-4); got.MinLR != 0 {
		t.Errorf("a floor of 0 stays 0, got %g", got.MinLR)
	}
	if got := (Config{}).WithLR(1e-4); math.Abs(got.MinLR-1e-4*DefaultMinLRRatio) > 1e-18 {
		t.Errorf("no earlier rate: min_lr %g, want %g", got.MinLR, 1e-4*DefaultMinLRRatio)
	}
}

// Another tokenizer brings its vocabulary; the same one, or hf, leaves it.
func TestWithTokenizerSetsVocabulary(t *testing.T) {
	c := Config{Tokenizer: "byte"}
	c.Model.VocabSize, c.Model.PadVocabTo = 256, 64
	g := c.WithTokenizer("gpt2")
	if g.Tokenizer != "gpt2" || g.Model.VocabSize != 50257 || g.Model.PadVocabTo != 64 {
		t.Errorf("byte → gpt2: %s, vocab %d, pad %d; want gpt2, 50257, 64", g.Tokenizer, g.Model.VocabSize, g.Model.PadVocabTo)
	}
	c.Model.VocabSize = 300
	if s := c.WithTokenizer("byte"); s.Model.VocabSize != 300 {
		t.Errorf("the same tokenizer changed the vocabulary to %d", s.Model.VocabSize)
	}
	if h := c.WithTokenizer(HFTokenizer); h.Model.VocabSize != 300 || h.Tokenizer != HFTokenizer {
		t.Errorf("hf: vocab %d, tokenizer %s", h.Model.VocabSize, h.Tokenizer)
	}
}

func TestEpochSteps(t *testing.T) {
	for _, c := range []struct {
		epochs             float64
		rows, batch, accum int
		want               int
	}{{1, 10, 4, 1, 3}, {3, 10, 2, 2, 8}, {2, 8, 4, 1, 4}, {0.5, 100, 8, 1, 7}, {0.01, 10, 4, 1, 1}} {
		got, err := EpochSteps(c.epochs, c.rows, c.batch, c.accum)
		if err != nil || got != c.want {
			t.Errorf("EpochSteps(%g, %d, %d, %d) = %d, %v; want %d", c.epochs, c.rows, c.batch, c.accum, got, err, c.want)
		}
	}
	for _, bad := range [][4]float64{{0, 10, 4, 1}, {math.NaN(), 10, 4, 1}, {math.Inf(1), 10, 4, 1}, {1, 0, 4, 1}, {1, 10, 0, 1}, {1e12, 1e6, 1, 1}} {
		if n, err := EpochSteps(bad[0], int(bad[1]), int(bad[2]), int(bad[3])); err == nil {
			t.Errorf("EpochSteps%v = %d, want an error", bad, n)
		}
	}
}

func TestFirstDifference(t *testing.T) {
	a := tinyConfig()
	if f := FirstDifference(a, a); f != "" {
		t.Errorf("a config differs from itself in %s", f)
	}
	b := a
	b.Model.Heads, b.Warmup = a.Model.Heads*2, a.Warmup+1
	if f := FirstDifference(a, b); f != "model.heads" {
		t.Errorf("heads and warmup changed: first difference %q, want model.heads", f)
	}
	b = a
	b.Seed++
	if f := FirstDifference(a, b); f != "seed" {
		t.Errorf("seed changed: first difference %q", f)
	}
}
