package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/posttrainllm/posttrainllm/checkpoint"
	"github.com/posttrainllm/posttrainllm/data"
	"github.com/posttrainllm/posttrainllm/data/hftokenizer"
	"github.com/posttrainllm/posttrainllm/hf"
	"github.com/posttrainllm/posttrainllm/presets"
	"github.com/posttrainllm/posttrainllm/runfolder"
	"github.com/posttrainllm/posttrainllm/train"
)

func newImportCmd() *cobra.Command {
	var (
		out, preset, tokenizer string
		opts                   runfolder.ImportOptions
	)
	cmd := &cobra.Command{
		Use:   "import HF_FOLDER|FILE.gguf",
		Short: "Make a run from a Hugging Face model folder (GPT-2, Llama, Mistral, Qwen2, Qwen3, Phi-3) or a GGUF file",
		Long: `import reads a Hugging Face model folder (config.json, and model.safetensors
or the shards listed in model.safetensors.index.json; float32, float16 or
bfloat16 weights) of GPT-2, Llama, Mistral, Qwen2, Qwen3 or Phi-3 (see
docs/huggingface.md for what each maps and refuses), or a llama.cpp GGUF
file of the llama or qwen2 architecture (F32, F16, BF16, Q4_0, Q4_1 or Q8_0
tensors; the quantized ones dequantized), and writes it as the step-0 checkpoint of a
new run folder with the training settings of --preset. An MLX-quantized
folder (mlx_lm.convert -q: config.json's quantization, packed weights with
scales and biases) keeps its transformer-block projections, embedding and
untied head quantized, so LoRA and DoRA fine-tunes train over them as
published (QLoRA). It writes no
optimizer state: a fine-tune makes its own, and train --resume starts the
optimizer fresh and saves its state with its first checkpoint. sample
--from, eval --from, finetune --from and train --resume take the run as they
take a trained one; export writes it back as a Hugging Face folder.

The tokenizer: a GPT-2 model with GPT-2's 50,257-token vocabulary uses
posttrainllm's GPT-2 tokenizer. Any other model with a tokenizer.json uses
it: the run's tokenizer is "hf", the tokenizer files copied to
RUN/hf-tokenizer, which train --resume, finetune --from, sample, eval, fuse
and export read. A GGUF file's tokenizer files (tokenizer.json,
tokenizer_config.json with the chat template, generation_config.json) are
made from its tokenizer.ggml.* metadata. --tokenizer byte or gpt2 picks one
of posttrainllm's own instead, whose ids are not the ones the model was
trained on.`,
		Example: `  posttrainllm import ~/models/gpt2 --out runs/gpt2
  posttrainllm import ~/models/SmolLM-135M --out runs/smollm --context 1024
  posttrainllm import ~/models/SmolLM2-135M-Instruct.Q4_1.gguf --out runs/smollm2
  posttrainllm sample --from runs/gpt2 --prompt "Hello"`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			src := args[0]
			gguf := hf.IsGGUF(src)
			if !gguf && !hf.IsFolder(src) {
				return usageError("invalid model %s: want a Hugging Face model folder holding %s, or a GGUF file", src, hf.ConfigFile)
			}
			readConfig, what := hf.ReadConfig, "folder"
			if gguf {
				readConfig, what = hf.ReadGGUFConfig, "GGUF file"
			}
			mc, family, err := readConfig(src, opts.Dtype)
			if err != nil {
				return usageError("invalid %s %s: %v", what, src, err)
			}
			if out == "" {
				out = filepath.Join("runs", strings.TrimSuffix(filepath.Base(filepath.Clean(src)), ".gguf"))
			}
			if opts.Context < 0 {
				return usageError("invalid --context %d: want > 0, or 0 for the folder's", opts.Context)
			}
			base, err := presets.Load(preset)
			if err != nil {
				return usageError("invalid --preset %s: want one of %s", preset, strings.Join(presets.Names(), ", "))
			}
			gpt2Vocab, err := data.TokenizerVocabSize("gpt2")
			if err != nil {
				return err
			}
			tokJSON := filepath.Join(src, "tokenizer.json")
			switch {
			case tokenizer == train.HFTokenizer:
				base.Tokenizer = tokenizer
			case tokenizer != "":
				if _, err := data.NewTokenizer(tokenizer); err != nil {
					return usageError("invalid --tokenizer: %v; or %s for the folder's tokenizer.json", err, train.HFTokenizer)
				}
				base.Tokenizer = tokenizer
			case family == hf.GPT2 && mc.VocabSize == gpt2Vocab:
				base.Tokenizer = "gpt2"
			case gguf || isFile(tokJSON):
				base.Tokenizer = train.HFTokenizer
			default:
				return usageError("%s is a %s model with a %d-token vocabulary and no tokenizer.json: pass --tokenizer %s to use one of posttrainllm's tokenizers (whose ids are not the model's)",
					src, family, mc.VocabSize, strings.Join(data.TokenizerNames(), " or "))
			}
			if base.Tokenizer == train.HFTokenizer && !gguf {
				tok, err := hftokenizer.Load(tokJSON)
				if err != nil {
					return usageError("invalid folder %s: %v", src, err)
				}
				if tok.VocabSize() > mc.VocabSize {
					return usageError("invalid folder %s: tokenizer.json has %d ids, the model's vocab_size is %d", src, tok.VocabSize(), mc.VocabSize)
				}
			}
			importer := runfolder.ImportHF
			if gguf {
				importer = runfolder.ImportGGUF
			}
			dir, family, err := importer(src, out, base, opts)
			if err != nil {
				return err
			}
			context := mc.Context
			if opts.Context > 0 {
				context = opts.Context
			}
			fmt.Fprintf(cmd.OutOrStdout(), "imported %s model %s (%.1fM parameters, context %d, %s tokenizer) as %s\n",
				family, src, mc.ParamCount()/1e6, context, base.Tokenizer, dir)
			return nil
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&out, "out", "", "new run folder to write (default runs/<folder or file name>)")
	fs.StringVar(&preset, "preset", "tiny", "training settings of the run (see posttrainllm presets); the model is the folder's")
	fs.StringVar(&tokenizer, "tokenizer", "", "tokenizer of the run: hf (the folder's tokenizer.json, or the GGUF file's), byte or gpt2 (default gpt2 for GPT-2's vocabulary, else hf)")
	fs.StringVar(&opts.Dtype, "dtype", "float32", "compute dtype of the model: float32, bfloat16 or float16")
	fs.IntVar(&opts.Context, "context", 0, "longest sequence to train and sample (0: the folder's; rotary models only)")
	return cmd
}

// isFile reports whether path is a regular file.
func isFile(path string) bool {
	info, err := os.Stat(path)
	return err == nil && info.Mode().IsRegular()
}

func newExportCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "export CHECKPOINT HF_FOLDER",
		Short: "Write a checkpoint as a Hugging Face folder",
		Long: `export writes the model of a checkpoint as a Hugging Face folder (config.json
and model.safetensors with Hugging Face's tensor names) that transformers
loads as the class the run was imported from (GPT2LMHeadModel,
LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM,
Phi3ForCausalLM). A model trained here must have GPT-2's shape (LayerNorm,
biases, learned positions, GELU, tied head) or the Llama shape (RMSNorm,
rotary positions, SwiGLU, no MLP biases; q/k/v biases export as Qwen2,
q/k norms as Qwen3); the default TinyGPT family has no Hugging Face counterpart.
A quantized checkpoint (imported from an MLX-quantized folder, or written
by fuse --quantize) is written in the layout mlx-lm loads: config.json's
quantization and the packed projections with their scales and biases.
HF_FOLDER must not exist or be empty.

` + checkpointRule("CHECKPOINT"),
		Example: `  posttrainllm export runs/gpt2 exported/gpt2
  posttrainllm export runs/smollm/checkpoints/step-00000200 exported/smollm`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if _, err := checkpoint.Resolve(args[0]); err != nil {
				return usageError("invalid checkpoint %s: %v", args[0], err)
			}
			family, err := runfolder.ExportHF(args[0], args[1])
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "exported %s as a Hugging Face %s folder %s\n", args[0], family, args[1])
			return nil
		},
	}
	return cmd
}
