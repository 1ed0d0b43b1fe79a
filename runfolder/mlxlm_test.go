package runfolder

import (
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"testing"

	"github.com/posttrainllm/posttrainllm/finetune"
	"github.com/posttrainllm/posttrainllm/hf"
	"github.com/posttrainllm/posttrainllm/internal/mlxtest"
	"github.com/posttrainllm/posttrainllm/internal/pyenv"
	"github.com/posttrainllm/posttrainllm/internal/realmodel"
	"github.com/posttrainllm/posttrainllm/internal/runtest"
	"github.com/posttrainllm/posttrainllm/mlx"
	"github.com/posttrainllm/posttrainllm/model"
)

// runMLXLM runs testdata/mlxlm_reference.py with args.
func runMLXLM(t testing.TB, args ...string) {
	t.Helper()
	pyenv.Run(t, pyenv.MLXLM(t), filepath.Join("testdata", "mlxlm_reference.py"), args...)
}

// mlxlmLogits returns mlx-lm's float32 logits [T·V] of the folder dir on
// tokens.
func mlxlmLogits(t testing.TB, dir string, tokens []int32) []float32 {
	t.Helper()
	return pyenv.Logits(t, runMLXLM, dir, tokens)
}

// checkpointLogits runs the model of a checkpoint directory on tokens
// (batch 1) the way fine-tuning computes with it: a quantized model's
// projections through quantized matmuls (peft.Quantized.Linears).
func checkpointLogits(t testing.TB, dir string, tokens []int32) []float32 {
	t.Helper()
	var out []float32
	mlxtest.Run(t, func(t testing.TB) {
		_, m, params, q, free, err := loadModelQuant(dir)
		if err != nil {
			t.Fatal(err)
		}
		defer free()
		var lin model.Linears
		if q != nil {
			if lin, err = q.Linears(params); err != nil {
				t.Fatal(err)
			}
			params = params[:len(q.Base)]
		}
		logits := m.LogitsWith(params, lin, mlx.FromSlice(tokens, 1, len(tokens)))
		if out, err = mlx.AsType(logits, mlx.Float32).Float32s(); err != nil {
			t.Fatal(err)
		}
	})
	return out
}

// checkTablesQuantized fails t unless the checkpoint dir holds its token
// embedding and an untied output head quantized.
func checkTablesQuantized(t testing.TB, dir string) {
	t.Helper()
	mlxtest.Run(t, func(t testing.TB) {
		_, m, _, q, free, err := loadModelQuant(dir)
		if err != nil {
			t.Fatal(err)
		}
		defer free()
		for i, s := range m.Specs {
			if (s.Name == model.TokenEmbeddingName || s.Kind == model.Head) && (q == nil || !slices.Contains(q.Indices, i)) {
				t.Errorf("%s: %s is not held quantized", dir, s.Name)
			}
		}
	})
}

// maxAbsDiff is the largest |a-b| of two logit vectors of one length.
func maxAbsDiff(t testing.TB, a, b []float32) float64 {
	t.Helper()
	if len(a) != len(b) || len(a) == 0 {
		t.Fatalf("logits of %d and %d values", len(a), len(b))
	}
	d := 0.0
	for i := range a {
		d = max(d, math.Abs(float64(a[i])-float64(b[i])))
	}
	return d
}

// writeFloatFolder writes a randomly initialised model of the config.json
// text cfgJSON as a float32 Hugging Face folder; the weights are scaled up
// from the initialisation so that the logits spread over several units and
// quantization moves them visibly.
func writeFloatFolder(t testing.TB, cfgJSON string) string {
	t.Helper()
	cfg, _, err := hf.ParseConfig([]byte(cfgJSON), "")
	if err != nil {
		t.Fatal(err)
	}
	m, err := model.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "float")
	mlxtest.Run(t, func(t testing.TB) {
		params, err := m.Init(5)
		if err != nil {
			t.Fatal(err)
		}
		defer mlx.Free(params...)
		scaled := make([]*mlx.Array, len(params))
		for i, p := range params {
			scaled[i] = p
			if m.Specs[i].Kind == model.Matrix {
				scaled[i] = mlx.MulScalar(p, 8)
			}
		}
		if _, err := hf.Save(dir, m, scaled); err != nil {
			t.Fatal(err)
		}
	})
	return dir
}

// quantizedRun writes a float folder of cfgJSON, quantizes it with
// mlx-lm (groupSize, bits) and imports the quantized folder; it returns
// the float folder, the quantized one and the imported checkpoint.
func quantizedRun(t testing.TB, cfgJSON string, groupSize, bits int) (float, quant, ck string) {
	t.Helper()
	float = writeFloatFolder(t, cfgJSON)
	quant = filepath.Join(t.TempDir(), "quantized")
	runMLXLM(t, "quantize", float, quant, strconv.Itoa(groupSize), strconv.Itoa(bits))
	base := runtest.TinyConfig()
	ck, _, err := ImportHF(quant, filepath.Join(t.TempDir(), "run"), base, ImportOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return float, quant, ck
}

// Llama-shaped test models whose projections' input sides (128, 256)
// every group size divides: tied embeddings, and an untied output head.
const (
	quantTied = `{"model_type":"llama","vocab_size":320,"hidden_size":128,"intermediate_size":256,` +
		`"num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2,"max_position_embeddings":64,"tie_word_embeddings":true}`
	quantUntied = `{"model_type":"qwen2","vocab_size":320,"hidden_size":128,"intermediate_size":256,` +
		`"num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2,"max_position_embeddings":64,` +
		`"tie_word_embeddings":false,"use_sliding_window":false}`
)

var quantTokens = []int32{3, 71, 140, 255, 9, 300, 17, 64, 128, 2}

// A folder mlx-lm quantized imports as a quantized run (the block
// projections, the embedding and an untied head packed, as mlx-lm holds
// them) whose logits, computed through quantized matmuls and the
// quantized embedding's row lookup, are mlx-lm's own on that folder:
// within float rounding, while the float original's differ by the
// quantization error, many times more.
func TestImportOfMLXQuantizedFolderMatchesMLXLM(t *testing.T) {
	for _, c := range []struct {
		name, cfg       string
		groupSize, bits int
		want            string
	}{
		{"llama tied 4-bit", quantTied, 64, 4, "4-bit, groups of 64"},
		{"qwen2 untied 8-bit", quantUntied, 32, 8, "8-bit, groups of 32"},
	} {
		t.Run(c.name, func(t *testing.T) {
			float, quant, ck := quantizedRun(t, c.cfg, c.groupSize, c.bits)
			got, err := CheckpointQuantization(ck)
			if err != nil || got != c.want {
				t.Fatalf("the imported checkpoint's quantization: %q, %v; want %q", got, err, c.want)
			}
			checkTablesQuantized(t, ck)
			ours := checkpointLogits(t, ck, quantTokens)
			ref := mlxlmLogits(t, quant, quantTokens)
			orig := mlxlmLogits(t, float, quantTokens)
			d, q := maxAbsDiff(t, ours, ref), maxAbsDiff(t, orig, ref)
			t.Logf("max |ours - mlx-lm| %.3g, max |float - quantized| %.3g", d, q)
			if d > 1e-4 {
				t.Errorf("the imported quantized model's logits differ from mlx-lm's by up to %.3g, want float rounding (<= 1e-4)", d)
			}
			if q < 100*max(d, 1e-5) {
				t.Errorf("the float original's logits are within %.3g of the quantized model's: the test cannot tell them apart", q)
			}
		})
	}
}

// A LoRA fine-tune over an imported MLX-quantized base trains through its
// quantized matmuls; fused with --quantize and exported, the folder loads
// in mlx-lm as a quantized model (config.json's quantization, packed
// projections) whose logits are ours on the fused checkpoint, and so does
// the float fuse and the quantized base exported as it was imported.
func TestExportOfQuantizedRunLoadsInMLXLM(t *testing.T) {
	_, quant, ck := quantizedRun(t, quantTied, 64, 4)
	ft := finetune.Config{Base: ck, Method: finetune.MethodLoRA, Rank: 4, Alpha: 16, Targets: []string{"all"},
		Train: runtest.WriteCompletions(t, "train.jsonl", 0, 16), MaskPrompt: true}
	cfg := runtest.FineTuneConfig(3)
	cfg.Accum, cfg.EvalEvery = 1, 0
	sum := runFineTune(t, cfg, ft, filepath.Join(t.TempDir(), "lora"), "")
	export := func(ck string) string {
		t.Helper()
		dst := filepath.Join(t.TempDir(), "exported")
		if _, err := ExportHF(ck, dst); err != nil {
			t.Fatal(err)
		}
		return dst
	}
	fuse := func(opts FuseOptions) string {
		t.Helper()
		dir, err := Fuse(sum.LastCheckpoint, "", filepath.Join(t.TempDir(), "fused"), opts)
		if err != nil {
			t.Fatal(err)
		}
		return dir
	}
	fusedQ, fusedF := fuse(FuseOptions{Quantize: 4}), fuse(FuseOptions{})
	if q, err := CheckpointQuantization(fusedQ); err != nil || q != "4-bit, groups of 64" {
		t.Fatalf("fuse --quantize 4 wrote a checkpoint of quantization %q (%v), want 4-bit, groups of 64", q, err)
	}
	checkTablesQuantized(t, fusedQ)
	if q, err := CheckpointQuantization(fusedF); err != nil || q != "" {
		t.Fatalf("fuse without --quantize wrote a checkpoint of quantization %q (%v), want float", q, err)
	}
	cfgOf := func(dir string) *hf.Quantization {
		q, err := hf.ReadQuantization(dir)
		if err != nil {
			t.Fatal(err)
		}
		return q
	}
	base := checkpointLogits(t, ck, quantTokens)
	for _, c := range []struct {
		name, ck  string
		quantized bool
	}{
		{"fused --quantize 4", fusedQ, true},
		{"fused float", fusedF, false},
		{"imported base", ck, true},
	} {
		dst := export(c.ck)
		if q := cfgOf(dst); (q != nil) != c.quantized || (q != nil && (q.Bits != 4 || q.GroupSize != 64)) {
			t.Errorf("%s: the exported config.json's quantization is %+v, want 4-bit groups of 64: %v", c.name, q, c.quantized)
		}
		ours, ref := checkpointLogits(t, c.ck, quantTokens), mlxlmLogits(t, dst, quantTokens)
		d := maxAbsDiff(t, ours, ref)
		t.Logf("%s: max |ours - mlx-lm| %.3g, max |ours - base| %.3g", c.name, d, maxAbsDiff(t, ours, base))
		if d > 1e-4 {
			t.Errorf("%s: mlx-lm's logits of the exported folder differ from ours by up to %.3g, want float rounding (<= 1e-4)", c.name, d)
		}
	}
	if d := maxAbsDiff(t, checkpointLogits(t, fusedF, quantTokens), base); d < 1e-3 {
		t.Errorf("the fused adapters move the logits by %.3g only: the test cannot tell base from fine-tune", d)
	}
	if d := maxAbsDiff(t, mlxlmLogits(t, export(ck), quantTokens), mlxlmLogits(t, quant, quantTokens)); d > 1e-4 {
		t.Errorf("the quantized base exported as imported computes up to %.3g from mlx-lm's quantized folder in mlx-lm", d)
	}
}

// The real SmolLM2-135M-Instruct, quantized by mlx-lm (4-bit, groups of
// 64) and imported, gives mlx-lm's logits on the quantized folder.
func TestRealMLXQuantizedFolderMatchesMLXLM(t *testing.T) {
	quant := filepath.Join(t.TempDir(), "smollm2-q4")
	runMLXLM(t, "quantize", realmodel.Folder(t), quant, "64", "4")
	ck, _, err := ImportHF(quant, filepath.Join(t.TempDir(), "run"), runtest.TinyConfig(), ImportOptions{Context: 64})
	if err != nil {
		t.Fatal(err)
	}
	if q, err := CheckpointQuantization(ck); err != nil || q != "4-bit, groups of 64" {
		t.Fatalf("the imported checkpoint's quantization: %q, %v", q, err)
	}
	checkTablesQuantized(t, ck)
	tokens := []int32{1, 504, 3575, 282, 4649, 314, 253, 2, 28, 10, 49151, 100}
	ours, ref := checkpointLogits(t, ck, tokens), mlxlmLogits(t, quant, tokens)
	scale := 0.0
	for _, v := range ref {
		scale = max(scale, math.Abs(float64(v)))
	}
	d := maxAbsDiff(t, ours, ref)
	t.Logf("max |ours - mlx-lm| %.3g at logit scale %.3g", d, scale)
	if d > 1e-4*scale {
		t.Errorf("the imported SmolLM2 4-bit model's logits differ from mlx-lm's by up to %.3g (scale %.3g), want float rounding", d, scale)
	}
}
