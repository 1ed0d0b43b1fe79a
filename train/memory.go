package train

import "github.com/posttrainllm/posttrainllm/model"

// autoChunkAbove is how many bytes of float32 logits a microbatch must
// have before the automatic setting chunks the loss, and autoChunkBytes
// and autoChunkBytesGPU how many bytes of float32 logits each automatic
// chunk holds at most on the CPU and on a GPU.
const (
	autoChunkAbove    = 1 << 30
	autoChunkBytes    = 64 << 20
	autoChunkBytesGPU = 512 << 20
)

// ModelMemory is the model.Memory of a run: gradient checkpointing as
// configured, and the loss's logits computed LossChunk positions at a time
// when LossChunk is positive, whole when it is -1.
//
// The automatic setting (0) chunks where a microbatch's float32 logits
// would exceed 1 GiB (positions × padded vocabulary × 4 bytes; the
// microbatch taken as MicroBatch, or Batch when the plan picks it), in
// chunks of the largest power of two of positions whose float32 logits
// fit in 64 MiB on the CPU (64 positions of a 151,936 vocabulary, 256 of
// 50,304 or 65,536) and in 512 MiB on a GPU (512 and 2,048), and computes
// the logits whole otherwise. It leaves a GPU's fused cross-entropy of
// pretraining alone (model.Memory.KeepFusedLoss), which never forms
// float32 logits: chunking it made the huge preset's step 1.9× slower
// with a 1.4× higher peak (docs/performance/gpu.md).
//
// Measured on the CPU (docs/finetuning.md, BenchmarkChunkedLoss: 4 × 512
// positions, vocabulary 65,536, width 64, so that the logits are nearly
// all of the step), one compiled value and gradient peaked at 1,623 MiB
// with the 512 MiB of float32 logits whole, 616 MiB in chunks of 256
// positions and 296 MiB in chunks of 64 (199 MiB with the head frozen, as
// adapter fine-tunes have it), for 0.69–1.03× its CPU time over two
// rounds, within their spread. On an H200, a LoRA fine-tune in the shape
// of Qwen2.5-0.5B (4 × 1,024 positions, 2.5 GB of float32 logits) peaked
// at 14.17 GiB in chunks of 512 against 17.69 GiB whole, and 8.41 against
// 15.30 GiB with MLX's memory limit low, at 0.90× the time unthrottled.
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
	row := 4 * c.Model.PaddedVocab() // float32 logits of one position
	if row <= 0 || rows*c.Model.Context*row <= autoChunkAbove {
		return 0
	}
	most := autoChunkBytes
	if c.Device == "gpu" {
		most = autoChunkBytesGPU
	}
	chunk := 16
	for 2*chunk*row <= most {
		chunk *= 2
	}
	return chunk
}
