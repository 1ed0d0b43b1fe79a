package train

import "github.com/posttrainllm/posttrainllm/model"

// ModelMemory is the model.Memory of a run: gradient checkpointing as
// configured, and the loss's logits computed LossChunk positions at a time
// when LossChunk is positive. The automatic setting (0) computes them
// whole, as -1 does: measured on an H200 (docs/finetuning.md), chunking
// the huge preset's 8,192-position microbatch by 1,024 made the step 1.7×
// slower and its peak memory 2.3× higher, and a Qwen2.5-0.5B-shaped
// LoRA step's peak did not move.
func (c Config) ModelMemory() model.Memory {
	mem := model.Memory{Checkpoint: c.GradCheckpoint}
	if c.LossChunk > 0 {
		mem.LossChunk = c.LossChunk
	}
	return mem
}
