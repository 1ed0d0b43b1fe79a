package main

import (
	"fmt"

	"github.com/posttrainllm/posttrainllm/checkpoint"
	"github.com/posttrainllm/posttrainllm/finetune"
	"github.com/posttrainllm/posttrainllm/runfolder"
	"github.com/spf13/cobra"
)

func newFuseCmd() *cobra.Command {
	var adapter, from, out string
	var overwrite bool
	var fuseOpts runfolder.FuseOptions
	cmd := &cobra.Command{
		Use:   "fuse",
		Short: "Merge a fine-tune's adapters into its base as an ordinary checkpoint",
		Long: `fuse applies the adapters of a LoRA or DoRA fine-tune (--adapter, a run folder
or checkpoint directory) to its base, the checkpoint recorded in its
finetune.json or --from, and writes the merged weights as an ordinary
checkpoint (step 0, fresh optimizer state) in the run folder --out. The
merged model computes exactly the logits of base + adapters, so sample,
eval and train --resume use it like any checkpoint. A base the adapters
trained over quantized (--quantize, or an MLX-quantized folder) is
dequantized before the merge. --quantize 4 (or 8; 2, 3, 5, 6) quantizes the
merged transformer-block projections again (MLX's affine mode, groups of
--q-group-size): the checkpoint then holds a quantized model, which sample,
eval, export (as an MLX-quantized folder mlx-lm loads) and adapter
fine-tunes read, and a full fine-tune refuses.`,
		Example: `  posttrainllm fuse --adapter runs/tiny-lora --out runs/tiny-fused
  posttrainllm sample --from runs/tiny-fused --prompt "ROMEO:"
  posttrainllm fuse --adapter runs/smollm2-qlora --out runs/smollm2-q4 --quantize 4
  posttrainllm export runs/smollm2-q4 exported/smollm2-q4`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if adapter == "" {
				return usageError("fuse needs --adapter RUN: the fine-tune's %s", checkpointPaths)
			}
			if out == "" {
				return usageError("fuse needs --out DIR: the run folder to write the merged checkpoint into")
			}
			dir, err := checkpoint.Resolve(adapter)
			if err != nil {
				return usageError("invalid --adapter %s: %v", adapter, err)
			}
			if _, err := finetune.ReadConfig(dir); err != nil {
				return usageError("invalid --adapter %s: %v", adapter, err)
			}
			if err := fuseOpts.Validate(); err != nil {
				return usageError("invalid --quantize/--q-group-size: %v", err)
			}
			if err := checkOut(out, false, overwrite); err != nil {
				return err
			}
			if overwrite {
				if err := clearRun(out); err != nil {
					return err
				}
			}
			ck, err := runfolder.Fuse(dir, from, out, fuseOpts)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "fused %s into %s\n", dir, ck)
			return nil
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&adapter, "adapter", "", "the fine-tune: a run folder (its newest checkpoint) or checkpoint directory")
	fs.StringVar(&from, "from", "", "base checkpoint (default: the one the fine-tune recorded)")
	fs.StringVar(&out, "out", "", "run folder for the merged checkpoint")
	fs.BoolVar(&overwrite, "overwrite", false, "replace the run in --out")
	fs.IntVar(&fuseOpts.Quantize, "quantize", 0, "quantize the merged projections to 4 or 8 bits (2, 3, 5, 6 too); 0 writes float weights")
	fs.IntVar(&fuseOpts.QGroupSize, "q-group-size", 0, "values per quantization scale with --quantize: 32, 64 or 128 (default 64)")
	return cmd
}
