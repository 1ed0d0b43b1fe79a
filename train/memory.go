package train

import "github.com/posttrainllm/posttrainllm/model"

// autoChunkAbove is how many bytes of float32 logits a microbatch must
// have before the automatic setting chunks the loss, and autoChunkBytes
// how many bytes of float32 logits each automatic chunk holds at most.
const (
	autoChunkAbove = 1 << 30
	autoChunkBytes = 64 << 20
)

// ModelMemory is the model.Memory of a run: gradient checkpointing as
// configured, and the loss's logits computed LossChunk positions at a time
// when LossChunk is positive, whole when it is -1.
//
// The automatic setting (0) chunks where a microbatch's float32 logits
// would exceed 1 GiB (positions × padded vocabulary × 4 bytes; the
// microbatch taken as MicroBatch, or Batch when the plan picks it), in
// chunks of the largest power of two of positions whose float32 logits
// fit in 64 MiB (64 positions of a 151,936 vocabulary, 256 of 50,304 or
// 65,536), and computes the logits whole otherwise. It leaves a GPU's
// fused cross-entropy of pretraining alone (model.Memory.KeepFusedLoss),
// which never forms float32 logits: chunking it made the huge preset's
// step 1.9× slower with a 1.4× higher peak (docs/performance/gpu.md).
//
// Smaller chunks hold less because MLX allocates each operation's output
// when the host queues it, and the host runs ahead of the device: the
// chunks queued at once coexist. Measured on the CPU (docs/finetuning.md,
// BenchmarkChunkedLoss: 4 × 512 positions, vocabulary 65,536, width 64, so
// that the logits are nearly all of the step), one compiled value and
// gradient peaked at 1,623 MiB with the 512 MiB of float32 logits whole,
// 616 MiB in chunks of 256 positions and 296 MiB in chunks of 64 (199 MiB
// with the head frozen, as adapter fine-tunes have it), for 0.69–1.03×
// its CPU time over two rounds, within their spread. On an H200, where the
// host queues much further ahead, a LoRA fine-tune in the shape of
// Qwen2.5-0.5B (4 × 1,024 positions, 2.5 GB of float32 logits) peaked at
// 17.69 GiB whole, 11.94–14.98 GiB in chunks of 512 positions, 11.23–13.41
// in chunks of 128 and 8.81–10.56 in chunks of 64 (mlx-lm: 11.59), at
// 0.047–0.063, 0.050–0.053 and 0.058–0.080 s per update (mlx-lm:
// 0.141–0.185 s): docs/finetuning.md.
func (c Config) ModelMemory() model.Memory {
	mem := model.Memory{Checkpoint: c.GradCheckpoint}
	switch {
	case c.LossChunk > 0:
		mem.LossChunk = c.LossChunk
	case c.LossChunk == 0:
		mem.LossChunk, mem.KeepFusedLoss = c.autoLossChunk(), true
	}
	return mem
}

// autoLossChunk is the automatic chunk of ModelMemory: 0 (the logits
// whole) unless a microbatch's float32 logits exceed autoChunkAbove.
func (c Config) autoLossChunk() int {
	rows := c.MicroBatch
	if rows <= 0 {
		rows = c.Batch
	}
	return lossChunkFor(rows*c.Model.Context, c.Model.PaddedVocab())
}

// lossChunkFor is the automatic loss chunk of a forward pass over
// positions positions of a vocabulary of vocab (padded) entries: 0 when
// their float32 logits fit in autoChunkAbove, else the largest power of
// two of positions whose logits fit in autoChunkBytes.
func lossChunkFor(positions, vocab int) int {
	row := 4 * vocab // float32 logits of one position
	if row <= 0 || positions*row <= autoChunkAbove {
		return 0
	}
	chunk := 16
	for 2*chunk*row <= autoChunkBytes {
		chunk *= 2
	}
	return chunk
}
