package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/posttrainllm/posttrainllm/hf"
	"github.com/posttrainllm/posttrainllm/train"
)

func newSampleCmd() *cobra.Command {
	var (
		from, adapter, prompt, device string
		opts                          train.SampleOptions
	)
	cmd := &cobra.Command{
		Use:   "sample",
		Short: "Generate text from a checkpoint",
		Long: `sample loads a checkpoint and continues --prompt by --tokens tokens, feeding
the model at most its context. --temperature 0 always picks the most likely
token; --top-k limits sampling to the k most likely.

` + checkpointRule("--from") + `

--adapter samples a fine-tune (posttrainllm finetune): its adapters applied
to its base, the checkpoint its finetune.json records or, given, --from.

--from also takes a Hugging Face model folder that import reads (config.json,
weights, tokenizer.json), sampled with its own tokenizer.`,
		Example: `  posttrainllm sample --from runs/tiny --prompt "ROMEO:"
  posttrainllm sample --from runs/tiny/checkpoints/step-00000200 --tokens 500 --temperature 0.8 --top-k 40
  posttrainllm sample --from runs/huge --device cpu --seed 7
  posttrainllm sample --adapter runs/tiny-lora --prompt "ROMEO:"
  posttrainllm sample --from ~/models/SmolLM-135M --prompt "The capital of France is" --temperature 0`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if from == "" && adapter == "" {
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
			folder := from != "" && hf.IsFolder(from)
			if from != "" && !folder {
				if _, err := train.ResolveCheckpoint(from); err != nil {
					return usageError("invalid --from %s: %v", from, err)
				}
			}
			if adapter != "" {
				if folder {
					return usageError("--adapter with the Hugging Face folder %s: import it first (posttrainllm import) and fine-tune from the run", from)
				}
				dir, err := train.ResolveCheckpoint(adapter)
				if err != nil {
					return usageError("invalid --adapter %s: %v", adapter, err)
				}
				if _, err := train.ReadFineTuneConfig(dir); err != nil {
					return usageError("invalid --adapter %s: %v", adapter, err)
				}
			}
			// Sampling needs no GPU: auto takes one where there is one.
			device, err := pickDevice(device, "cpu", "")
			if err != nil {
				return err
			}
			opts.Tokenizers = openTokenizer
			var text string
			switch {
			case adapter != "":
				text, err = train.SampleAdapted(adapter, from, prompt, device, opts)
			case folder:
				text, err = sampleFolder(from, prompt, device, opts)
			default:
				text, err = train.SampleCheckpoint(from, prompt, device, opts)
			}
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), text)
			return nil
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&from, "from", "", "run folder (its newest checkpoint), checkpoint directory or Hugging Face folder")
	fs.StringVar(&adapter, "adapter", "", "fine-tune run folder or checkpoint whose adapters to apply (--from: its base, default the recorded one)")
	fs.StringVar(&prompt, "prompt", "", "text to continue (default: the end-of-text token)")
	fs.IntVar(&opts.MaxTokens, "tokens", 200, "tokens to generate")
	fs.Float64Var(&opts.Temperature, "temperature", 0.8, "sampling temperature; 0 is greedy")
	fs.IntVar(&opts.TopK, "top-k", 0, "sample among the k most likely tokens (0: all)")
	fs.Uint64Var(&opts.Seed, "seed", 1, "sampling seed")
	fs.StringVar(&device, "device", "auto", deviceUsage)
	return cmd
}
