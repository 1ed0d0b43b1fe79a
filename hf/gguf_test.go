package hf

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/posttrainllm/posttrainllm/internal/pyenv"
	"github.com/posttrainllm/posttrainllm/internal/realmodel"
	"github.com/posttrainllm/posttrainllm/mlx"
)

// runGGUFReference runs hf/testdata/gguf_reference.py with args.
func runGGUFReference(t testing.TB, args ...string) {
	t.Helper()
	cmd := exec.Command(python(t), append([]string{filepath.Join("testdata", "gguf_reference.py")}, args...)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("gguf_reference.py %v: %v\n%s", args, err, out)
	}
}

// realGGUF is the real model's GGUF file imported once for the tests of
// this file (the import takes seconds).
var realGGUF struct {
	once sync.Once
	m    *GGUFModel
	err  error
}

func loadRealGGUF(t *testing.T) *GGUFModel {
	t.Helper()
	path := realmodel.GGUF(t)
	realGGUF.once.Do(func() { realGGUF.m, realGGUF.err = LoadGGUF(path, "") })
	if realGGUF.err != nil {
		t.Fatal(realGGUF.err)
	}
	return realGGUF.m
}

// TestGGUFImportMatchesConvertedFolder imports SmolLM2's GGUF and the
// folder an independent script (llama.cpp's gguf package) converted it to:
// the same configuration, the same parameters, the same logits.
func TestGGUFImportMatchesConvertedFolder(t *testing.T) {
	g := loadRealGGUF(t)
	f, err := Load(realmodel.Folder(t), "")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Free()
	if g.Family != f.Family || g.Model.Model.Config != f.Model.Config {
		t.Fatalf("GGUF: %s %+v\nfolder: %s %+v", g.Family, g.Model.Model.Config, f.Family, f.Model.Config)
	}
	c := g.Model.Model.Config
	if c.Layers != 30 || c.DModel != 576 || c.Heads != 9 || c.KVHeads != 3 || c.VocabSize != 49152 || !c.TiedEmbeddings || c.RoPEBase != 100000 {
		t.Fatalf("config %+v is not SmolLM2-135M's", c)
	}
	for i, spec := range g.Model.Model.Specs {
		a, err := g.Params[i].Float32s()
		if err != nil {
			t.Fatal(err)
		}
		b, err := f.Params[i].Float32s()
		if err != nil {
			t.Fatal(err)
		}
		for j := range b {
			if a[j] != b[j] {
				t.Fatalf("%s[%d] = %g, the converted folder has %g", spec.Name, j, a[j], b[j])
			}
		}
	}
	tokens := []int32{1, 9690, 198, 2683, 359, 253, 5356, 5646, 11173, 3365, 3511, 308, 34519, 28, 7018, 411, 407, 19712, 8182, 2, 198, 1}
	got, want := modelLogits(t, g.Model, tokens), modelLogits(t, f, tokens)
	scale, worst := 0.0, 0.0
	for i := range want {
		scale = math.Max(scale, math.Abs(float64(want[i])))
		worst = math.Max(worst, math.Abs(float64(got[i]-want[i])))
	}
	if len(got) != len(want) || scale == 0 || worst > 1e-5*scale {
		t.Fatalf("logits of the GGUF import differ from the folder's by %g at scale %g (%d and %d values)", worst, scale, len(got), len(want))
	}
	t.Logf("max |Δlogit| %.3g at scale %.3g", worst, scale)
}

// TestGGUFTokenizerMatchesFolder: the tokenizer.json made from the GGUF's
// metadata has the converted folder's vocabulary, merges, added tokens and
// pre-tokenizer, and the tokenizers library gives the same ids with both
// on the whole of tinyshakespeare and on stress texts; tokenizer_config.json
// carries the same chat template and special tokens.
func TestGGUFTokenizerMatchesFolder(t *testing.T) {
	g := loadRealGGUF(t)
	if g.TokenizerErr != nil {
		t.Fatal(g.TokenizerErr)
	}
	dir := t.TempDir()
	for name, b := range g.Tokenizer {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	folder := realmodel.Folder(t)
	out, err := exec.Command(python(t), filepath.Join("testdata", "tokenizer_compare.py"),
		filepath.Join(dir, "tokenizer.json"), filepath.Join(folder, "tokenizer.json"), realmodel.Shakespeare(t)).CombinedOutput()
	if err != nil {
		t.Fatalf("tokenizer_compare.py: %v\n%s", err, out)
	}
	if n, err := strconv.Atoi(strings.TrimSpace(string(out))); err != nil || n < 300000 {
		t.Fatalf("tokenizer_compare.py compared %q ids, want the whole text's", out)
	}
	read := func(path string) map[string]any {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	got, want := read(filepath.Join(dir, "tokenizer_config.json")), read(filepath.Join(folder, "tokenizer_config.json"))
	for _, key := range []string{"chat_template", "bos_token", "eos_token", "unk_token", "pad_token"} {
		if got[key] != want[key] || got[key] == nil {
			t.Errorf("tokenizer_config.json %s = %q, the folder's is %q", key, got[key], want[key])
		}
	}
	if !strings.Contains(got["chat_template"].(string), "<|im_start|>") {
		t.Errorf("chat_template %q is not SmolLM2's", got["chat_template"])
	}
	gen, wantGen := read(filepath.Join(dir, "generation_config.json")), read(filepath.Join(folder, "generation_config.json"))
	if fmt.Sprint(gen) != fmt.Sprint(wantGen) {
		t.Errorf("generation_config.json %v, the folder's is %v", gen, wantGen)
	}
}

// TestGGUFHeldOutLossMatchesReference: over the first 4,096 tokens of
// tinyshakespeare in 512-token windows, the imported model's mean
// cross-entropy is within 1e-4 (relative) of a numpy float64 forward over
// the weights llama.cpp's gguf package dequantizes.
func TestGGUFHeldOutLossMatchesReference(t *testing.T) {
	g := loadRealGGUF(t)
	dir := t.TempDir()
	tok := filepath.Join(realmodel.Folder(t), "tokenizer.json")
	const n, window = 4096, 512
	runGGUFReference(t, "loss", realmodel.GGUF(t), tok, realmodel.Shakespeare(t), strconv.Itoa(n), strconv.Itoa(window), dir)
	b, err := os.ReadFile(filepath.Join(dir, "ids.i32"))
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]int32, len(b)/4)
	for i := range ids {
		ids[i] = int32(binary.LittleEndian.Uint32(b[4*i:]))
	}
	lb, err := os.ReadFile(filepath.Join(dir, "loss.txt"))
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
	t.Logf("held-out loss over %d tokens: %.6f, reference %.6f", n, got, want)
}

// TestGGUFTinyMatchesReference imports a small GGUF of each architecture
// with every tensor type import reads (Q8_0 embeddings, Q4_0 q, Q4_1 k,
// F16 v, BF16 gate and untied output, F32 down) and checks its logits
// against the numpy reference over llama.cpp's dequantization. Gemma 3's
// import is checked on the published Gemma-3-270M (gemma_test.go).
func TestGGUFTinyMatchesReference(t *testing.T) {
	for _, arch := range []string{Llama, Qwen2} {
		t.Run(arch, func(t *testing.T) { tinyGGUF(t, arch) })
	}
}

// tinyGGUF checks the import of a small GGUF of architecture arch (Qwen2's
// with q, k and v biases, and rows llama.cpp does not permute).
func tinyGGUF(t *testing.T, arch string) {
	path := filepath.Join(t.TempDir(), "tiny.gguf")
	runGGUFReference(t, "make", path, "--arch", arch)
	g, err := LoadGGUF(path, "")
	if err != nil {
		t.Fatal(err)
	}
	defer g.Free()
	if c := g.Model.Model.Config; c.TiedEmbeddings || g.Family != arch {
		t.Fatalf("the tiny %s model (untied) imports as a %s model, tied %v", arch, g.Family, c.TiedEmbeddings)
	}
	tokens := []int32{1, 7, 99, 3, 3, 120, 45, 0, 64}
	closeLogits(t, "tiny GGUF", modelLogits(t, g.Model, tokens), pyenv.Logits(t, runGGUFReference, path, tokens))
}

// TestGGUFRefusals: architectures, tensor types and pre-tokenizers that
// import does not map are errors that name them, before any tensor is read.
func TestGGUFRefusals(t *testing.T) {
	dir := t.TempDir()
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"--arch", "gemma2"}, `general.architecture "gemma2" is not supported`},
		{[]string{"--iq4nl"}, `tensor "blk.1.ffn_down.weight" is IQ4_NL; import reads F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_K`},
	}
	for i, c := range cases {
		path := filepath.Join(dir, fmt.Sprintf("%d.gguf", i))
		runGGUFReference(t, append([]string{"make", path}, c.args...)...)
		if _, _, err := ReadGGUFConfig(path, ""); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ReadGGUFConfig %v: %v, want an error with %q", c.args, err, c.want)
		}
		if _, err := LoadGGUF(path, ""); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("LoadGGUF %v: %v, want an error with %q", c.args, err, c.want)
		}
	}
	path := filepath.Join(dir, "pre.gguf")
	runGGUFReference(t, "make", path, "--pre", "tekken")
	g, err := LoadGGUF(path, "")
	if err != nil {
		t.Fatal(err)
	}
	defer g.Free()
	if g.TokenizerErr == nil || !strings.Contains(g.TokenizerErr.Error(), `tokenizer.ggml.pre "tekken" is not supported`) {
		t.Fatalf("tokenizer of an unknown pre-tokenizer: %v, want an error naming it", g.TokenizerErr)
	}
}

// TestGGUFTruncatedOrCorrupt: copies of the real file cut short (in the
// header, the vocabulary, the tensor records, the weights) and garbage
// get one line of error each, no panic.
func TestGGUFTruncatedOrCorrupt(t *testing.T) {
	src := realmodel.GGUF(t)
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	h, err := mlx.ReadGGUFHeader(src)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cuts := []int64{0, 3, 7, 23, 100, 5000, 400000, h.DataOffset - 40, h.DataOffset + 10, int64(len(b)) / 2, int64(len(b)) - 1}
	for _, n := range cuts {
		p := filepath.Join(dir, fmt.Sprintf("cut-%d.gguf", n))
		if err := os.WriteFile(p, b[:n], 0o644); err != nil {
			t.Fatal(err)
		}
		if _, _, err := ReadGGUFConfig(p, ""); err == nil {
			t.Errorf("ReadGGUFConfig of the first %d bytes succeeded", n)
		}
		_, err := LoadGGUF(p, "")
		if err == nil || strings.Contains(err.Error(), "\n") {
			t.Errorf("LoadGGUF of the first %d bytes: %q, want one line of error", n, err)
		}
	}
	garbage := make([]byte, 1<<16)
	for i := range garbage {
		garbage[i] = byte(i*7919 + i>>8)
	}
	for i, g := range [][]byte{garbage, append([]byte("GGUF\x03\x00\x00\x00"), garbage...)} {
		p := filepath.Join(dir, fmt.Sprintf("garbage-%d.gguf", i))
		os.WriteFile(p, g, 0o644)
		if _, err := LoadGGUF(p, ""); err == nil || strings.Contains(err.Error(), "\n") {
			t.Errorf("LoadGGUF of garbage %d: %q, want one line of error", i, err)
		}
	}
}
