package train

import (
	"math"
	"strings"
	"testing"

	"github.com/posttrainllm/posttrainllm/internal/runtest/fixture"
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
	ds := memoryDataset(t, fixture.SyntheticText(4000), 32)
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
