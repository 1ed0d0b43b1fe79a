package main

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"
)

func newRootCmd(stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:   "posttrainllm",
		Short: "Train, evaluate, benchmark and sample small GPT models on MLX",
		Long: `posttrainllm trains small GPT models with MLX from Go: the whole optimizer
step (forward, backward, accumulation, clipping, update) is one compiled MLX
function. Runs start from a preset (posttrainllm presets); every preset field
can be overridden by a flag.`,
		Example: `  posttrainllm train --preset tiny --steps 200 --corpus input.txt --out runs/tiny
  posttrainllm train --resume runs/tiny --steps 400
  posttrainllm sample --from runs/tiny --prompt "ROMEO:"
  posttrainllm eval --from runs/tiny
  posttrainllm bench --preset tiny --compare
  posttrainllm presets`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return &exitError{code: exitUsage, err: fmt.Errorf("%w (see %s --help)", err, c.CommandPath())}
	})
	root.AddCommand(newTrainCmd(), newFinetuneCmd(), newFuseCmd(), newBenchCmd(), newSampleCmd(), newChatCmd(), newServeCmd(), newEvalCmd(), newPresetsCmd(), newVersionCmd(),
		newTokenizeCmd(), newImportCmd(), newExportCmd())
	return root
}

// usageError is a command line that cannot be run as given.
func usageError(format string, args ...any) error {
	return &exitError{code: exitUsage, err: fmt.Errorf(format, args...)}
}
