package hf

import (
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/posttrainllm/posttrainllm/data/hftokenizer"
	"github.com/posttrainllm/posttrainllm/internal/pyenv"
	"github.com/posttrainllm/posttrainllm/internal/realmodel"
	"github.com/posttrainllm/posttrainllm/mlx"
	"github.com/posttrainllm/posttrainllm/model"
)

// realGemma is Gemma-3-270M's GGUF imported once for the tests of this
// file, with its tokenizer files written to a folder.
var realGemma struct {
	once sync.Once
	m    *GGUFModel
	dir  string
	err  error
}

func loadGemma(t *testing.T) (*GGUFModel, string) {
	t.Helper()
	path := realmodel.GemmaGGUF(t)
	realGemma.once.Do(func() {
		if realGemma.m, realGemma.err = LoadGGUF(path, ""); realGemma.err != nil {
			return
		}
		if realGemma.err = realGemma.m.TokenizerErr; realGemma.err != nil {
			return
		}
		if realGemma.dir, realGemma.err = os.MkdirTemp("", "gemma-tokenizer-"); realGemma.err != nil {
			return
		}
		for name, b := range realGemma.m.Tokenizer {
			if realGemma.err = os.WriteFile(filepath.Join(realGemma.dir, name), b, 0o644); realGemma.err != nil {
				return
			}
		}
	})
	if realGemma.err != nil {
		t.Fatal(realGemma.err)
	}
	return realGemma.m, realGemma.dir
}

// runGemmaReference runs hf/testdata/gemma_reference.py with args and
// returns its output.
func runGemmaReference(t *testing.T, args ...string) []byte {
	t.Helper()
	return pyenv.Run(t, python(t), filepath.Join("testdata", "gemma_reference.py"), args...)
}

// TestGemmaGGUFConfig: the import reads Gemma-3-270M as Gemma 3 is
// published: 18 layers, five sliding ones (window 512, rotary base
// 10,000) before each global one (base 1,000,000), and Gemma's norms,
// gated MLP and scaled, tied embeddings.
func TestGemmaGGUFConfig(t *testing.T) {
	g, _ := loadGemma(t)
	c := g.Model.Model.Config
	want := model.Config{VocabSize: 262144, DModel: 640, Layers: 18, Heads: 4, KVHeads: 1, HeadDimension: 256,
		MLPHidden: 2048, SlidingWindow: 512, SlidingPattern: 6, RoPEBase: 1e6, RoPELocalBase: 10000, QueryScale: 256,
		MLP: model.MLPGeGLU, GELU: model.GELUTanh, QKNorm: true, PostNorms: true, EmbedScale: true, TiedEmbeddings: true}
	got := model.Config{VocabSize: c.VocabSize, DModel: c.DModel, Layers: c.Layers, Heads: c.Heads, KVHeads: c.KVHeads,
		HeadDimension: c.HeadDimension, MLPHidden: c.MLPHidden, SlidingWindow: c.SlidingWindow, SlidingPattern: c.SlidingPattern,
		RoPEBase: c.RoPEBase, RoPELocalBase: c.RoPELocalBase, QueryScale: c.QueryScale, MLP: c.MLP, GELU: c.GELU,
		QKNorm: c.QKNorm, PostNorms: c.PostNorms, EmbedScale: c.EmbedScale, TiedEmbeddings: c.TiedEmbeddings}
	if got != want || g.Family != Gemma3 {
		t.Fatalf("%s %+v\nwant %s %+v", g.Family, got, Gemma3, want)
	}
	var global []int
	for l := range c.Layers {
		if c.LayerWindow(l) == 0 {
			global = append(global, l)
		}
	}
	if !slices.Equal(global, []int{5, 11, 17}) {
		t.Errorf("global layers %v, want [5 11 17]", global)
	}
}

// TestGemmaHeldOutLossMatchesReference: over the first 4,096 tokens of
// tinyshakespeare in 512-token windows, the imported Gemma-3-270M's mean
// cross-entropy is within 1e-4 (relative) of a numpy float64 forward over
// the weights llama.cpp's gguf package dequantizes.
func TestGemmaHeldOutLossMatchesReference(t *testing.T) {
	g, dir := loadGemma(t)
	out := t.TempDir()
	const n, window = 4096, 512
	runGemmaReference(t, "loss", realmodel.GemmaGGUF(t), filepath.Join(dir, "tokenizer.json"), realmodel.Shakespeare(t),
		strconv.Itoa(n), strconv.Itoa(window), out)
	b, err := os.ReadFile(filepath.Join(out, "ids.i32"))
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]int32, len(b)/4)
	for i := range ids {
		ids[i] = int32(binary.LittleEndian.Uint32(b[4*i:]))
	}
	if ids[0] != 2 {
		t.Fatalf("the reference's ids start %v, want <bos> (2) first", ids[:4])
	}
	lb, err := os.ReadFile(filepath.Join(out, "loss.txt"))
	if err != nil {
		t.Fatal(err)
	}
	want, err := strconv.ParseFloat(strings.TrimSpace(string(lb)), 64)
	if err != nil {
		t.Fatal(err)
	}
	var total float64
	err = mlx.Do(func() error {
		for s := 0; s < n; s += window {
			s0 := mlx.NewScope()
			x := mlx.FromSlice(ids[s:s+window], 1, window)
			y := mlx.FromSlice(ids[s+1:s+window+1], 1, window)
			l, err := mlx.Sum(g.Model.Model.TokenLosses(g.Params, x, y)).Item()
			s0.Close()
			if err != nil {
				return err
			}
			total += l
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	got := total / n
	if rel := math.Abs(got-want) / want; !(rel <= 1e-4) {
		t.Fatalf("held-out loss %.6f, the float64 reference %.6f (relative difference %.2g)", got, want, rel)
	}
	t.Logf("held-out loss over %d tokens: %.6f, reference %.6f (relative difference %.2g)", n, got, want, math.Abs(got-want)/want)
}

// TestGemmaGreedyMatchesReference: greedy continuations of three prompts,
// decoded one token at a time through the KV cache, are the float64
// reference's, token for token.
func TestGemmaGreedyMatchesReference(t *testing.T) {
	g, dir := loadGemma(t)
	tok, err := hftokenizer.Load(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	const n = 8
	prompts := []string{"The capital of France is", "First Citizen:\nBefore we proceed any further, hear me", "def fibonacci(n):\n"}
	var args []string
	var ids [][]int32
	for _, p := range prompts {
		p := append([]int32{2}, tok.EncodeSpecial(p)...) // <bos>, as the template adds
		ids = append(ids, p)
		s := make([]string, len(p))
		for i, id := range p {
			s[i] = strconv.Itoa(int(id))
		}
		args = append(args, strings.Join(s, ","))
	}
	out := runGemmaReference(t, append([]string{"greedy", realmodel.GemmaGGUF(t), strconv.Itoa(n)}, args...)...)
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != len(prompts) {
		t.Fatalf("reference printed %q, want %d lines", out, len(prompts))
	}
	for i, p := range ids {
		got := greedyCached(t, g.Model, p, n)
		want, gap, _ := strings.Cut(lines[i], " # ")
		if fmt.Sprint(joinIDs(got)) != want {
			t.Errorf("prompt %q: greedy %s (%q), the reference %s (smallest top-2 gap %s)", prompts[i], joinIDs(got), tok.Decode(got), want, gap)
			continue
		}
		t.Logf("%q → %q (smallest top-2 gap %s)", prompts[i], tok.Decode(got), gap)
	}
}

func joinIDs(ids []int32) string {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = strconv.Itoa(int(id))
	}
	return strings.Join(s, ",")
}

// greedyCached continues prompt by its n most likely tokens, feeding the
// prompt once and then each new token alone through a KV cache.
func greedyCached(t *testing.T, m *Model, prompt []int32, n int) []int32 {
	t.Helper()
	var out []int32
	err := mlx.Do(func() error {
		cache := m.Model.NewKVCache()
		defer cache.Free()
		next := prompt
		for range n {
			s := mlx.NewScope()
			logits := m.Model.LogitsCached(m.Params, mlx.FromSlice(next, 1, len(next)), cache)
			last := mlx.Slice(logits, []int{0, len(next) - 1, 0}, []int{1, len(next), logits.Dim(2)})
			id, err := mlx.ArgmaxAll(last).Item()
			s.Keep(cache.Arrays()...)
			s.Close()
			if err != nil {
				return err
			}
			next = []int32{int32(id)}
			out = append(out, int32(id))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestGemmaExportImportsBack exports the imported Gemma-3-270M as a
// Gemma3ForCausalLM folder (norms written as Gemma's w = gain − 1) and
// imports it back: the same configuration and the same logits, bit for
// bit; the folder's norm tensors are the gains less one, and the numpy
// reference reading the folder as transformers lays it out (norms
// multiplying by 1 + w) gives the same logits.
func TestGemmaExportImportsBack(t *testing.T) {
	g, _ := loadGemma(t)
	dir := t.TempDir()
	family, err := Save(dir, g.Model.Model, g.Params)
	if err != nil {
		t.Fatal(err)
	}
	if family != Gemma3 {
		t.Fatalf("exported as %q, want %q", family, Gemma3)
	}
	b, err := Load(dir, "")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Free()
	if b.Model.Config != g.Model.Model.Config {
		t.Fatalf("config read back %+v\nwant %+v", b.Model.Config, g.Model.Model.Config)
	}
	tokens := []int32{2, 818, 5279, 529, 7001, 563}
	got, want := modelLogits(t, b, tokens), modelLogits(t, g.Model, tokens)
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("logit %d: %g read back, %g exported", i, got[i], want[i])
		}
	}
	out := filepath.Join(t.TempDir(), "logits.f32")
	args := []string{"folder-logits", dir, out}
	for _, id := range tokens {
		args = append(args, strconv.Itoa(int(id)))
	}
	runGemmaReference(t, args...)
	closeLogits(t, "exported folder", got, readFloat32s(t, out))
	raw, _, err := mlx.LoadSafetensors(filepath.Join(dir, WeightsFile))
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range raw {
		defer a.Free()
	}
	w, err := raw["model.layers.0.input_layernorm.weight"].Float32s()
	if err != nil {
		t.Fatal(err)
	}
	gain, err := g.Params[slices.IndexFunc(g.Model.Model.Specs, func(s model.ParamSpec) bool { return s.Name == "blocks.0.attn_norm.weight" })].Float32s()
	if err != nil {
		t.Fatal(err)
	}
	for i := range w {
		if w[i] != gain[i]-1 {
			t.Fatalf("input_layernorm.weight[%d] = %g, want the gain %g less one", i, w[i], gain[i])
		}
	}
}

// readFloat32s reads a file of little-endian float32 values.
func readFloat32s(t *testing.T, path string) []float32 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]float32, len(b)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return out
}
