package main

import (
	"context"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/posttrainllm/posttrainllm/checkpoint"
	"github.com/posttrainllm/posttrainllm/data"
	"github.com/posttrainllm/posttrainllm/finetune"
	"github.com/posttrainllm/posttrainllm/generate"
	"github.com/posttrainllm/posttrainllm/hf"
	"github.com/posttrainllm/posttrainllm/runfolder"
)

func newSampleCmd() *cobra.Command {
	var (
		from, adapter, prompt, device, dtype string
		chat, system                         string
		opts                                 runfolder.SampleOptions
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
weights, tokenizer.json), sampled with its own tokenizer, or a GGUF file
(llama or qwen2 architecture), sampled with the tokenizer its metadata
describes.

Special tokens written in --prompt (such as <|im_start|>) are encoded as
their ids, as Hugging Face's tokenizers do; --specials-as-text encodes them
as plain text.

--chat QUESTION asks one question through the model's chat template (with
--system, after a system message) and prints the reply as it is generated,
ending at the model's end-of-turn token: one turn of posttrainllm chat.`,
		Example: `  posttrainllm sample --from runs/tiny --prompt "ROMEO:"
  posttrainllm sample --from runs/tiny/checkpoints/step-00000200 --tokens 500 --temperature 0.8 --top-k 40
  posttrainllm sample --from runs/huge --device cpu --seed 7
  posttrainllm sample --adapter runs/tiny-lora --prompt "ROMEO:"
  posttrainllm sample --from ~/models/SmolLM-135M --prompt "The capital of France is" --temperature 0
  posttrainllm sample --from ~/models/SmolLM2-135M-Instruct.Q4_1.gguf --prompt "The capital of France is" --temperature 0
  posttrainllm sample --from runs/smollm --chat "What is the capital of France?" --temperature 0`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if from == "" && adapter == "" {
				return usageError("sample needs --from RUN: %s", checkpointPaths)
			}
			gen := genFlags{opts: opts.Options, device: device}
			if err := gen.check(); err != nil {
				return err
			}
			src := generationSource{from, adapter, dtype}
			if chat != "" {
				if prompt != "" {
					return usageError("--chat and --prompt: give one (--chat asks a question through the chat template, --prompt continues text)")
				}
				return sampleChat(cmd.OutOrStdout(), cmd.ErrOrStderr(), src, system, chat, gen)
			}
			if system != "" {
				return usageError("--system goes with --chat")
			}
			gguf := from != "" && hf.IsGGUF(from)
			folder := from != "" && (hf.IsFolder(from) || gguf)
			if from != "" && !folder {
				if _, err := checkpoint.Resolve(from); err != nil {
					return usageError("invalid --from %s: %v", from, err)
				}
			}
			if adapter != "" {
				if folder {
					return usageError("--adapter with the model %s: import it first (posttrainllm import) and fine-tune from the run", from)
				}
				dir, err := checkpoint.Resolve(adapter)
				if err != nil {
					return usageError("invalid --adapter %s: %v", adapter, err)
				}
				if _, err := finetune.ReadConfig(dir); err != nil {
					return usageError("invalid --adapter %s: %v", adapter, err)
				}
			}
			if err := src.checkDtype(); err != nil {
				return err
			}
			// Sampling needs no GPU: auto takes one where there is one.
			device, err := pickDevice(device, "cpu", "")
			if err != nil {
				return err
			}
			opts.Tokenizers = openTokenizer
			var timing generate.Timing
			opts.Timing = &timing
			var text string
			switch {
			case adapter != "":
				text, err = runfolder.SampleAdapted(adapter, from, prompt, device, opts)
			case gguf:
				text, err = sampleGGUF(from, dtype, prompt, device, opts)
			case folder:
				text, err = sampleFolder(from, dtype, prompt, device, opts)
			default:
				text, err = runfolder.SampleCheckpoint(from, prompt, device, opts)
			}
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), text)
			printRates(cmd.ErrOrStderr(), timing)
			return nil
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&from, "from", "", "run folder (its newest checkpoint), checkpoint directory, Hugging Face folder or GGUF file")
	fs.StringVar(&adapter, "adapter", "", "fine-tune run folder or checkpoint whose adapters to apply (--from: its base, default the recorded one)")
	fs.StringVar(&prompt, "prompt", "", "text to continue (default: the end-of-text token)")
	fs.BoolVar(&opts.SpecialsAsText, "specials-as-text", false, "encode special tokens written in --prompt as plain text, not as their ids")
	fs.StringVar(&chat, "chat", "", "a question to answer through the model's chat template (one turn of chat)")
	fs.StringVar(&system, "system", "", "with --chat: the system message")
	fs.IntVar(&opts.MaxTokens, "tokens", 200, "tokens to generate")
	fs.Float64Var(&opts.Temperature, "temperature", 0.8, "sampling temperature; 0 is greedy")
	fs.IntVar(&opts.TopK, "top-k", 0, "sample among the k most likely tokens (0: all)")
	fs.Float64Var(&opts.TopP, "top-p", 0, "sample among the most likely tokens whose probabilities add up to p (0 or 1: all)")
	fs.Uint64Var(&opts.Seed, "seed", 1, "sampling seed")
	fs.StringVar(&device, "device", "auto", deviceUsage)
	fs.StringVar(&dtype, "dtype", "", dtypeUsage)
	return cmd
}

// printRates writes a generation's prompt and generation rates, as
// mlx_lm generate does.
func printRates(w io.Writer, t generate.Timing) {
	fmt.Fprintf(w, "prompt: %d tokens, %.1f tokens/s; generation: %d tokens, %.1f tokens/s\n",
		t.PromptTokens, t.PromptRate(), t.Generated, t.GenerationRate())
}

// sampleChat answers one question through the chat template, streaming
// the reply to out and its rates to errOut.
func sampleChat(out, errOut io.Writer, src generationSource, system, question string, gen genFlags) error {
	m, err := src.openOn("sample", gen.device)
	if err != nil {
		return err
	}
	defer m.Close()
	var msgs []data.Message
	if system != "" {
		msgs = append(msgs, data.Message{Role: "system", Content: system})
	}
	msgs = append(msgs, data.Message{Role: "user", Content: question})
	var timing generate.Timing
	opts := gen.opts
	opts.Timing = &timing
	_, err = m.Generate(context.Background(), generate.Request{Messages: msgs, Options: opts}, func(delta string) error {
		_, err := io.WriteString(out, delta)
		return err
	})
	if err != nil {
		return err
	}
	if _, err = fmt.Fprintln(out); err != nil {
		return err
	}
	printRates(errOut, timing)
	return nil
}
