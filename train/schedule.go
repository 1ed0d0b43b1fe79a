package train

import "github.com/posttrainllm/posttrainllm/optim"

// NewSchedule builds the run's learning-rate schedule over its optimizer
// updates (not microbatches).
func NewSchedule(cfg Config) (optim.Schedule, error) {
	return optim.NewSchedule(cfg.Schedule, cfg.LR, cfg.MinLR, cfg.Warmup, cfg.Steps, cfg.DecayFraction)
}
