package train

import (
	"fmt"

	"github.com/posttrainllm/posttrainllm/step"
)

// RunStepOptions are the step options of a training run: its accumulation
// as configured (Plan.StepOptions takes the plan's instead), clipping and
// compile mode, and compute-dtype copies of the parameters when the model
// keeps float32 masters but computes in a lower precision (the copies save
// a cast kernel per parameter per step; see step.StepOptions.ComputeCopies).
func RunStepOptions(cfg Config) step.StepOptions {
	o := step.StepOptions{Accum: cfg.Accum, GradClip: cfg.GradClip, Compile: cfg.Compile}
	if m := cfg.Model; m.MasterFP32 && m.ComputeDtype() != m.ParamDtype() {
		o.ComputeCopies, o.ComputeDtype = true, m.ComputeDtype()
	}
	return o
}

// WindowSource says how a run of cfg over a training view of n tokens
// feeds its windows to the step: gathered on the device from a
// step.TokenStream (device true) when Config.Windows asks for it, explicitly
// or by default on a GPU, unless something needs them on the host; why
// not when they are copied from the host. What needs the host:
// BPE-dropout, whose windows are re-encoded rather than slices of the
// corpus; GaLore's and Sophia's refreshes, which read an update's tokens;
// a corpus longer than step.MaxStreamTokens.
func WindowSource(cfg Config, n int) (device bool, why string) {
	switch {
	case cfg.Windows == "host":
		return false, "windows = host"
	case cfg.Windows != "device" && cfg.Device != "gpu":
		return false, "the default on the CPU"
	case cfg.BPEDropout > 0:
		return false, "BPE-dropout re-encodes each window"
	case cfg.Optimizer == "galore" || cfg.Optimizer == "sophia":
		return false, fmt.Sprintf("the %s refresh reads the batch's tokens", cfg.Optimizer)
	case n > step.MaxStreamTokens:
		return false, fmt.Sprintf("the corpus has %d tokens, more than the %d a token stream holds", n, step.MaxStreamTokens)
	}
	return true, ""
}
