package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/posttrainllm/posttrainllm/hf"
	"github.com/posttrainllm/posttrainllm/train"
)

func newSampleCmd() *cobra.Command {
	var (
		from, prompt, device string
		opts                 train.SampleOptions
	)
	cmd := &cobra.Command{
		Use:   "sample",
		Short: "Generate text from a checkpoint",
		Long: `sample loads a checkpoint and continues --prompt by --tokens tokens, feeding
the model at most its context. --temperature 0 always picks the most likely
token; --top-k limits sampling to the k most likely.

` + checkpointRule("--from") + `
--from also takes a Hugging Face GPT-2 or Llama folder (config.json,
weights, tokenizer.json), sampled with its own tokenizer.`,
		Example: `  posttrainllm sample --from runs/tiny --prompt "ROMEO:"
  posttrainllm sample --from runs/tiny/checkpoints/step-00000200 --tokens 500 --temperature 0.8 --top-k 40
  posttrainllm sample --from runs/huge --device cpu --seed 7
  posttrainllm sample --from ~/models/SmolLM-135M --prompt "The capital of France is" --temperature 0`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if from == "" {
				return usageError("sample needs --from RUN: %s", checkpointPaths)
			}
			if err := opts.Validate(); err != nil {
				switch {
				case opts.MaxTokens < 1:
					return usageError("invalid --tokens %d: want >= 1", opts.MaxTokens)
				case opts.TopK < 0:
					return usageError("invalid --top-k %d: want >= 0 (0 for no limit)", opts.TopK)
				}
				return usageError("invalid --temperature %g: want a finite value >= 0", opts.Temperature)
			}
			folder := hf.IsFolder(from)
			if _, err := train.ResolveCheckpoint(from); err != nil && !folder {
				return usageError("invalid --from %s: %v", from, err)
			}
			// Sampling needs no GPU: auto takes one where there is one.
			device, err := pickDevice(device, "cpu", "")
			if err != nil {
				return err
			}
			sample := train.SampleCheckpoint
			if folder {
				sample = sampleFolder
			}
			text, err := sample(from, prompt, device, opts)
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), text)
			return nil
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&from, "from", "", "run folder (its newest checkpoint), checkpoint directory or Hugging Face folder")
	fs.StringVar(&prompt, "prompt", "", "text to continue (default: the end-of-text token)")
	fs.IntVar(&opts.MaxTokens, "tokens", 200, "tokens to generate")
	fs.Float64Var(&opts.Temperature, "temperature", 0.8, "sampling temperature; 0 is greedy")
	fs.IntVar(&opts.TopK, "top-k", 0, "sample among the k most likely tokens (0: all)")
	fs.Uint64Var(&opts.Seed, "seed", 1, "sampling seed")
	fs.StringVar(&device, "device", "auto", deviceUsage)
	return cmd
}
