package train

import "github.com/posttrainllm/posttrainllm/model"

// ModelMemory is the model.Memory of a run: gradient checkpointing as
// configured, and the chunked loss as LossChunk says; automatic (0) chunks
// by model.LossChunkRows positions when a microbatch of Batch sequences
// holds more than that, where the float32 logits of the whole microbatch
// would be the largest array of the step, and computes them whole
// otherwise, where chunking would only add the recomputation.
func (c Config) ModelMemory() model.Memory {
	mem := model.Memory{Checkpoint: c.GradCheckpoint}
	switch {
	case c.LossChunk > 0:
		mem.LossChunk = c.LossChunk
	case c.LossChunk == 0 && c.Batch*c.Model.Context > model.LossChunkRows:
		mem.LossChunk = model.LossChunkRows
	}
	return mem
}
