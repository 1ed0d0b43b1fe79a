// Package checkpoint keeps training runs on disk: the layout of a run
// folder (RUN/checkpoints/step-00000100/), the atomic writing of a
// checkpoint directory, listing, pruning and resolving checkpoints, and
// reading named arrays back in a model's order. It knows files and
// arrays, not what a run trains: package train decides what a checkpoint
// holds (its RunState, parameters and optimizer state) and writes it here.
package checkpoint

import (
	"fmt"
	"path/filepath"
)

// Format is the version of the checkpoint layout written here; a
// checkpoint's state.json records it.
const Format = 1

// Files of a checkpoint directory (RUN/checkpoints/step-00000100/).
const (
	ModelFile     = "model.safetensors"     // parameters, model config in metadata
	OptimizerFile = "optimizer.safetensors" // optimizer state
	StateFile     = "state.json"            // the run state (train.RunState)
	// AdapterFile holds a LoRA or DoRA fine-tune's adapters, in place of
	// ModelFile.
	AdapterFile = "adapters.safetensors"
	// FineTuneFile holds a fine-tune's settings (finetune.Config).
	FineTuneFile = "finetune.json"
)

const (
	checkpointDir = "checkpoints"
	bestDir       = "best"
	stepPrefix    = "step-"
	tmpPrefix     = ".tmp-"
	oldSuffix     = ".old" // the previous copy of a step being re-saved
)

// Root is where a run folder keeps its checkpoints.
func Root(runDir string) string { return filepath.Join(runDir, checkpointDir) }

// BestRoot is where a run folder keeps the checkpoint of its lowest
// held-out loss (RUN/best/step-NNNNNNNN), apart from the newest ones
// under Root, which pruning would remove. Resolve(RUN) never picks it:
// a resumed run continues from the newest checkpoint.
func BestRoot(runDir string) string { return filepath.Join(runDir, bestDir) }

// DirName is the name of the checkpoint directory of step under Root:
// step-NNNNNNNN, so names sort by step.
func DirName(step int) string { return fmt.Sprintf("%s%08d", stepPrefix, step) }

// RunDirOf returns the run folder of checkpoint directory dir, which
// checkpoints live in as RUN/checkpoints/step-N.
func RunDirOf(dir string) string { return filepath.Dir(filepath.Dir(filepath.Clean(dir))) }
