package hf

import (
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/posttrainllm/posttrainllm/data/hftokenizer"
	"github.com/posttrainllm/posttrainllm/internal/realmodel"
	"github.com/posttrainllm/posttrainllm/mlx"
)

// TestGemmaSlidingWindowMatchesReference runs Gemma-3-270M on 700 tokens
// of tinyshakespeare, past its sliding window of 512, and compares the
// logits at positions 520, 600 and 699 with the float64 reference's: once
// in one forward pass (the training path, a window mask), once through
// the KV cache (a chunk of 300 positions after 300, masked; then one
// position at a time, reading the last 512 keys). Both agree with the
// windowed reference to 1e-4 of the logits' scale, and the reference
// without the window differs from it by far more, so the window is what
// they agree on.
func TestGemmaSlidingWindowMatchesReference(t *testing.T) {
	g, dir := loadGemma(t)
	tok, err := hftokenizer.Load(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	text, err := os.ReadFile(realmodel.Shakespeare(t))
	if err != nil {
		t.Fatal(err)
	}
	const T = 700
	ids := append([]int32{2}, tok.Encode(string(text[:8000]))...)[:T]
	positions := []int{520, 600, 699}
	args := []string{"logits", realmodel.GemmaGGUF(t), filepath.Join(t.TempDir(), "logits.f32"), "520,600,699"}
	for _, id := range ids {
		args = append(args, strconv.Itoa(int(id)))
	}
	runGemmaReference(t, args...)
	b, err := os.ReadFile(args[2])
	if err != nil {
		t.Fatal(err)
	}
	V := g.Model.Model.Config.VocabSize
	ref := make([]float32, len(b)/4)
	for i := range ref {
		ref[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	if len(ref) != 2*len(positions)*V {
		t.Fatalf("reference wrote %d logits, want %d", len(ref), 2*len(positions)*V)
	}
	windowed, full := ref[:len(ref)/2], ref[len(ref)/2:]

	rows := func(logits *mlx.Array, at ...int) []float32 { // rows at of logits [1, T', V]
		var out []float32
		for _, p := range at {
			r, err := mlx.Slice(logits, []int{0, p, 0}, []int{1, p + 1, V}).Float32s()
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, r...)
		}
		return out
	}
	var once, cached []float32
	err = mlx.Do(func() error {
		s := mlx.NewScope()
		once = rows(g.Model.Model.Logits(g.Params, mlx.FromSlice(ids, 1, T)), positions...)
		s.Close()
		cache := g.Model.Model.NewKVCache()
		defer cache.Free()
		feed := func(from, to int) *mlx.Array {
			return g.Model.Model.LogitsCached(g.Params, mlx.FromSlice(ids[from:to], 1, to-from), cache)
		}
		for _, c := range [][2]int{{0, 300}, {300, 600}} {
			s := mlx.NewScope()
			l := feed(c[0], c[1])
			if c[0] == 300 {
				cached = rows(l, 520-300)
			}
			s.Keep(cache.Arrays()...)
			s.Close()
		}
		for p := 600; p < T; p++ {
			s := mlx.NewScope()
			l := feed(p, p+1)
			if p == 600 || p == 699 {
				cached = append(cached, rows(l, 0)...)
			}
			s.Keep(cache.Arrays()...)
			s.Close()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	scale, fullDiff := 0.0, 0.0
	for i := range windowed {
		scale = math.Max(scale, math.Abs(float64(windowed[i])))
		fullDiff = math.Max(fullDiff, math.Abs(float64(full[i]-windowed[i])))
	}
	for _, c := range []struct {
		what string
		got  []float32
	}{{"one forward pass", once}, {"KV cache", cached}} {
		closeLogits(t, c.what, c.got, windowed)
	}
	if fullDiff < 1e-2*scale {
		t.Fatalf("the reference without the window differs by only %g (scale %g): the window does not matter at these positions", fullDiff, scale)
	}
	t.Logf("the reference without the window differs by %.3g", fullDiff)
}
