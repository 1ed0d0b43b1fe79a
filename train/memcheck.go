package train

import (
	"fmt"
	"math"

	"github.com/posttrainllm/posttrainllm/mlx"
	"github.com/posttrainllm/posttrainllm/model"
)

// maxDim is the largest array dimension MLX represents: its shapes are
// 32-bit integers, so a larger size would wrap around inside MLX.
const maxDim = math.MaxInt32

// checkDims refuses sizes that do not fit an MLX array dimension.
func (c Config) checkDims() error {
	for _, f := range []struct {
		name string
		v    int
	}{
		{"vocab_size", c.Model.VocabSize}, {"d_model", c.Model.DModel}, {"layers", c.Model.Layers},
		{"heads", c.Model.Heads}, {"context", c.Model.Context}, {"batch", c.Batch}, {"accum", c.Accum},
		{"micro_batch", c.MicroBatch},
	} {
		if f.v > maxDim {
			return fmt.Errorf("%s = %d, want <= %d (MLX array dimensions are 32-bit)", f.name, f.v, maxDim)
		}
	}
	return nil
}

// MemoryNeed breaks down a lower bound on the bytes a run holds at once.
type MemoryNeed struct {
	Params  float64 // parameter count
	Weights float64 // parameters and their float32 gradients
	Logits  float64 // one microbatch's float32 logits (MicroBatch sequences when set)
	Tokens  float64 // the prefetcher's token buffers (Go memory)
}

// Total is the sum of the parts.
func (n MemoryNeed) Total() float64 { return n.Weights + n.Logits + n.Tokens }

// ForwardBatch is the sequences of one forward pass as far as the config
// fixes it: MicroBatch when set, else the batch (an automatic plan may
// choose more on a GPU; ProbePlan checks each choice itself).
func (c Config) ForwardBatch() int {
	if c.MicroBatch > 0 {
		return c.MicroBatch
	}
	return c.Batch
}

// MinMemory is a lower bound on the memory a run of c needs: activations,
// optimizer state and MLX's caches come on top. It is computed in float64,
// so absurd sizes cannot overflow.
func (c Config) MinMemory() MemoryNeed {
	m := c.Model
	v := float64(m.PaddedVocab())
	params := m.ParamCount()
	paramBytes := float64(m.ParamDtype().Size())
	perBatch := float64(c.Batch) * float64(m.Context)
	perMicro := float64(c.ForwardBatch()) * float64(m.Context)
	return MemoryNeed{
		Params:  params,
		Weights: params * (paramBytes + float64(mlx.Float32.Size())),
		Logits:  perMicro * v * float64(mlx.Float32.Size()),
		Tokens:  2 * float64(c.Accum) * perBatch * 4 * float64(c.PrefetchDepth+2),
	}
}

// CheckModelMemory refuses to build a model (for sampling) whose
// parameters alone exceed this machine's memory.
func CheckModelMemory(m model.Config) error {
	total := physicalMemory()
	need := m.ParamCount() * float64(m.ParamDtype().Size())
	if total == 0 || need <= float64(total) {
		return nil
	}
	return fmt.Errorf("its model of %.3g parameters (vocab_size %d, d_model %d, layers %d) needs %s, more than the %s of this machine",
		m.ParamCount(), m.VocabSize, m.DModel, m.Layers, gib(need), gib(float64(total)))
}

// CheckMemory refuses a run whose MinMemory exceeds this machine's
// physical memory, before anything is allocated: MLX 0.32 does not survive
// a failed allocation (it hands the null pointer to its kernels and the
// process dies of a segmentation fault), and Go aborts on one. A machine
// whose memory size is unknown passes.
func (c Config) CheckMemory() error {
	total := physicalMemory()
	need := c.MinMemory()
	if total == 0 || need.Total() <= float64(total) {
		return nil
	}
	return fmt.Errorf("the run needs at least %s of memory (%s for %.3g parameters and their gradients: vocab_size %d, d_model %d, layers %d; "+
		"%s for the logits of batch %d × context %d × vocab_size %d; %s for token buffers), more than the %s of this machine; "+
		"use a smaller model, batch or context",
		gib(need.Total()), gib(need.Weights), need.Params, c.Model.VocabSize, c.Model.DModel, c.Model.Layers,
		gib(need.Logits), c.ForwardBatch(), c.Model.Context, c.Model.VocabSize, gib(need.Tokens), gib(float64(total)))
}

// gib writes a byte count in GiB, MiB or KiB.
func gib(b float64) string {
	switch {
	case b >= 1<<30:
		return fmt.Sprintf("%.1f GiB", b/(1<<30))
	case b >= 1<<20:
		return fmt.Sprintf("%.1f MiB", b/(1<<20))
	}
	return fmt.Sprintf("%.1f KiB", b/(1<<10))
}
