package train

import (
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/posttrainllm/posttrainllm/checkpoint"
	"github.com/posttrainllm/posttrainllm/internal/mlxtest"
	"github.com/posttrainllm/posttrainllm/mlx"
	"github.com/posttrainllm/posttrainllm/model"
	"github.com/posttrainllm/posttrainllm/peft"
)

// sameLosses fails unless got equals want within float32 rounding.
func sameLosses(t testing.TB, label string, got, want []float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d losses, want %d", label, len(got), len(want))
	}
	for i := range want {
		if math.Abs(got[i]-want[i]) > 1e-5*math.Abs(want[i]) {
			t.Fatalf("%s: loss %d = %.7f, without %.7f", label, i+1, got[i], want[i])
		}
	}
}

// Pretraining with --grad-checkpoint and the chunked loss traces once with
// accumulation, a cosine schedule and an automatic micro-batch, and its
// losses follow those of the plain step update for update (so do the
// gradients that produced them).
func TestGradCheckpointAndChunkedLossTrainLikeThePlainStep(t *testing.T) {
	ds := memoryDataset(t, syntheticText(4000), 32)
	cfg := tinyConfig()
	cfg.Accum, cfg.Steps, cfg.Warmup, cfg.MicroBatch, cfg.LossChunk = 2, 5, 1, 0, -1
	want, _ := setupLosses(t, cfg, ds)
	for _, c := range []struct {
		name       string
		checkpoint bool
		chunk      int
	}{{"checkpoint", true, -1}, {"chunked loss", false, 48}, {"both", true, 40}} {
		cfg.GradCheckpoint, cfg.LossChunk = c.checkpoint, c.chunk
		got, traces := setupLosses(t, cfg, ds)
		if traces != 1 {
			t.Fatalf("%s: traced %d times, want 1", c.name, traces)
		}
		sameLosses(t, c.name, got, want)
	}
}

// The automatic loss chunk: none for small logits, chunks of at most
// 64 MiB of float32 logits above 1 GiB of them on every device, a GPU's
// fused loss kept; a configured chunk or -1 as asked.
func TestModelMemoryChunksLargeLogits(t *testing.T) {
	cfg := tinyConfig() // 4 × 32 positions
	if m := cfg.ModelMemory(); m.LossChunk != 0 || m.Checkpoint {
		t.Errorf("a 128-position microbatch: %+v, want the plain loss", m)
	}
	cfg.Batch, cfg.Model.Context = 4, 1024
	if m := cfg.ModelMemory(); m.LossChunk != 0 {
		t.Errorf("4096 positions of a 256 vocabulary: chunk %d, want none", m.LossChunk)
	}
	// Qwen2.5's vocabulary: 4 × 1,024 positions have 2.3 GiB of float32 logits.
	cfg.Model.VocabSize = 151_936
	if m := cfg.ModelMemory(); m.LossChunk != 64 {
		t.Errorf("2.3 GiB of logits on the CPU: chunk %d, want 64 (37 MiB of logits; 128 would be 74 MiB)", m.LossChunk)
	}
	cfg.MicroBatch = 1 // 0.58 GiB
	if m := cfg.ModelMemory(); m.LossChunk != 0 {
		t.Errorf("a microbatch of 1 × 1,024 positions (0.58 GiB of logits): chunk %d, want none", m.LossChunk)
	}
	cfg.MicroBatch, cfg.Batch, cfg.Model.VocabSize, cfg.Model.PadVocabTo = 0, 8, 50_257, 64 // padded to 50,304: 1.5 GiB
	if m := cfg.ModelMemory(); m.LossChunk != 256 {
		t.Errorf("8 × 1,024 positions of 50,304 padded entries: chunk %d, want 256", m.LossChunk)
	}
	cfg.Device = "gpu"
	if m := cfg.ModelMemory(); m.LossChunk != 256 || !m.KeepFusedLoss {
		t.Errorf("8 × 1,024 positions of 50,304 padded entries on a GPU: %+v, want chunks of 256 (49 MiB) and the fused loss kept", m)
	}
	cfg.Batch, cfg.Model.VocabSize, cfg.Model.PadVocabTo = 4, 151_936, 0
	if m := cfg.ModelMemory(); m.LossChunk != 64 {
		t.Errorf("4 × 1,024 positions of 151,936 on a GPU: chunk %d, want 64 (37 MiB; 128 would be 74 MiB)", m.LossChunk)
	}
	cfg.LossChunk = 256
	if m := cfg.ModelMemory(); m.LossChunk != 256 || m.KeepFusedLoss {
		t.Errorf("loss_chunk 256: chunk %d, want 256", m.LossChunk)
	}
	cfg.Device, cfg.LossChunk = "cpu", -1
	if m := cfg.ModelMemory(); m.LossChunk != 0 {
		t.Errorf("loss_chunk -1: chunk %d, want none", m.LossChunk)
	}
	cfg.LossChunk = -2
	if err := cfg.WithDefaults().Validate(); err == nil || !strings.Contains(err.Error(), "loss_chunk -2") {
		t.Errorf("loss_chunk -2: error %v", err)
	}
}

// qloraConfig is the fine-tune of TestFineTuneLoRATracesOnceLearnsAndResumesExactly
// over a base quantized to bits in groups of 32.
func qloraConfig(t testing.TB, base string, bits int) FineTuneConfig {
	gs := 32
	if bits == 0 {
		gs = 0
	}
	return FineTuneConfig{Base: base, Method: MethodLoRA, Rank: 4, Alpha: 8, Targets: []string{"attn", "mlp"},
		Train: writeCompletions(t, "train.jsonl", 0, 40), Valid: writeCompletions(t, "valid.jsonl", 100, 10),
		MaskPrompt: true, Quantize: bits, QGroupSize: gs}
}

// A QLoRA fine-tune (4-bit base) with accumulation, a cosine schedule,
// gradient checkpointing and the chunked loss traces once and learns; its
// first held-out loss is within quantization error of the float base's and
// not equal to it; it samples; and fuse writes exactly the merge of its
// adapters into the dequantized base.
func TestQLoRAFineTune(t *testing.T) {
	base := writeBase(t)
	cfg := fineTuneConfig(4)
	floatSum := runFineTune(t, cfg, qloraConfig(t, base, 0), filepath.Join(t.TempDir(), "float"), "")

	cfg.GradCheckpoint, cfg.LossChunk = true, 24
	ft := qloraConfig(t, base, 4)
	run := filepath.Join(t.TempDir(), "qlora")
	sum := runFineTune(t, cfg, ft, run, "")
	if sum.Traces != 1 {
		t.Errorf("traced %d times, want 1", sum.Traces)
	}
	if !(sum.ValLoss < sum.InitialValLoss) {
		t.Errorf("held-out loss %.4f -> %.4f, want it to fall", sum.InitialValLoss, sum.ValLoss)
	}
	if d := math.Abs(sum.InitialValLoss - floatSum.InitialValLoss); d == 0 || d > 0.02*floatSum.InitialValLoss {
		t.Errorf("initial held-out loss %.6f over the 4-bit base, %.6f over the float one: want a difference within quantization error",
			sum.InitialValLoss, floatSum.InitialValLoss)
	}
	if _, err := SampleAdapted(run, "", "the", "cpu", SampleOptions{MaxTokens: 4}); err != nil {
		t.Errorf("sampling the QLoRA fine-tune: %v", err)
	}
	fusedDir, err := Fuse(run, "", filepath.Join(t.TempDir(), "fused"), FuseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	mlxtest.Run(t, func(t testing.TB) {
		fused, err := LoadCheckpoint(fusedDir)
		if err != nil {
			t.Fatal(err)
		}
		defer fused.Free()
		m, err := model.New(fused.State.Config.Model)
		if err != nil {
			t.Fatal(err)
		}
		got, err := fused.OrderedParams(m)
		if err != nil {
			t.Fatal(err)
		}
		// The reference: quantize the float base, dequantize, merge by hand.
		ck, err := LoadCheckpoint(base)
		if err != nil {
			t.Fatal(err)
		}
		defer ck.Free()
		floatBase, err := ck.OrderedParams(m)
		if err != nil {
			t.Fatal(err)
		}
		q, frozen, err := peft.QuantizeBase(m.Specs, floatBase, 32, 4)
		if err != nil {
			t.Fatal(err)
		}
		a, err := peft.New(ft.Adapter(), m.Specs)
		if err != nil {
			t.Fatal(err)
		}
		adapters, err := checkpoint.LoadNamed(filepath.Join(sum.LastCheckpoint, checkpoint.AdapterFile), a.Names(), SpecShapes(a.Specs))
		if err != nil {
			t.Fatal(err)
		}
		want := a.Effective(q.Dequantize(frozen), adapters)
		for i := range want {
			g, err1 := got[i].Float32s()
			w, err2 := mlx.AsType(want[i], mlx.Float32).Float32s()
			if err1 != nil || err2 != nil {
				t.Fatal(err1, err2)
			}
			for e := range w {
				if g[e] != w[e] {
					t.Fatalf("fused %s[%d] = %g, the dequantized merge %g", m.Specs[i].Name, e, g[e], w[e])
				}
			}
		}
	})
}

func TestFullFineTuneRefusesQuantizedBase(t *testing.T) {
	ft := FineTuneConfig{Base: "b", Method: MethodFull, Train: "t.jsonl", Quantize: 4}
	err := ft.Validate()
	if err == nil || !strings.Contains(err.Error(), "quantize 4") || !strings.Contains(err.Error(), "full fine-tune") {
		t.Errorf("full fine-tune with quantize 4: error %v", err)
	}
	ft.Method, ft.Rank, ft.Alpha, ft.Targets = MethodLoRA, 4, 8, []string{"attn"}
	for _, c := range []struct {
		bits, gs int
		want     string
	}{{7, 0, "bits 7"}, {4, 48, "group size 48"}, {0, 64, "without quantize"}} {
		ft.Quantize, ft.QGroupSize = c.bits, c.gs
		if err := ft.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("quantize %d, group %d: error %v, want %q", c.bits, c.gs, err, c.want)
		}
	}
}
