package finetune

import (
	"fmt"
	"github.com/posttrainllm/posttrainllm/train"
)

// Defaults are a fresh fine-tune's run settings over the base's
// config: a short cosine run with the learning rate of the method
// (FineTuneLR), whatever the base was pretrained with, evaluating every 50
// updates. The base's model and tokenizer stay.
func Defaults(base train.Config, method string) train.Config {
	c := base
	c.Steps, c.Batch, c.Accum, c.MicroBatch, c.MemoryBudget = 200, 4, 1, 0, ""
	c.Optimizer, c.WeightDecay, c.GradClip = "adamw", nil, 1
	c.GaLoreRank, c.GaLoreGap, c.GaLoreScale, c.SophiaEvery, c.SophiaRho = 0, 0, 0, 0, 0
	lr := FineTuneLR(method)
	c.Schedule, c.LR, c.MinLR, c.Warmup, c.DecayFraction = "cosine", lr, lr*train.DefaultMinLRRatio, 10, 0
	c.Compile, c.Seed = true, 1
	c.Data, c.ValData, c.BPEDropout = "", "", 0
	c.LogEvery, c.EvalEvery, c.EvalTokens, c.CheckpointEvery, c.KeepCheckpoints = 10, 50, 16384, 0, 3
	c.KeepBest, c.Patience = false, 0
	return c
}

// SetEpochs sets the fine-tune's steps to epochs passes over its training
// rows (train.EpochSteps), an update taking Batch × Accum rows on each of ranks
// ranks, fitting the warm-up to them unless keepWarmup (a warm-up the user
// set), and validates the result. It returns the steps.
func (f *FineTuner) SetEpochs(epochs float64, ranks int, keepWarmup bool) (int, error) {
	c := f.Config
	steps, err := train.EpochSteps(epochs, f.Train.Len(), c.Batch*ranks, c.Accum)
	if err != nil {
		return 0, err
	}
	c.Steps = steps
	if !keepWarmup {
		c = c.FitWarmup()
	}
	if err := c.Validate(); err != nil {
		return 0, fmt.Errorf("%d steps: %w", steps, err)
	}
	f.Config = c
	return steps, nil
}

// Fine-tunes' default peak learning rates: adapters take the rate TRL's
// LoRA recipes use (1e-4), a full fine-tune TRL's SFTConfig default (2e-5;
// mlx-lm's is 1e-5 for every method). A fine-tune never inherits the base
// run's pretraining rate.
const (
	DefaultAdapterLR = 1e-4
	DefaultFullLR    = 2e-5
)

// FineTuneLR is the default peak learning rate of a fine-tune by method.
func FineTuneLR(method string) float64 {
	if method == MethodFull {
		return DefaultFullLR
	}
	return DefaultAdapterLR
}
