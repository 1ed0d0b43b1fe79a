package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/posttrainllm/posttrainllm/generate"
)

// genFlags are the sampling flags of chat and sample --chat.
type genFlags struct {
	opts   generate.Options
	device string
}

// add registers the flags; tokens is the default reply budget.
func (g *genFlags) add(cmd *cobra.Command, tokens int, temperature float64) {
	fs := cmd.Flags()
	fs.IntVar(&g.opts.MaxTokens, "tokens", tokens, "the most tokens to generate (a reply ends earlier at the model's end-of-turn token)")
	fs.Float64Var(&g.opts.Temperature, "temperature", temperature, "sampling temperature; 0 is greedy")
	fs.IntVar(&g.opts.TopK, "top-k", 0, "sample among the k most likely tokens (0: all)")
	fs.Float64Var(&g.opts.TopP, "top-p", 0, "sample among the most likely tokens whose probabilities add up to p (0 or 1: all)")
	fs.Uint64Var(&g.opts.Seed, "seed", 1, "sampling seed")
	fs.StringVar(&g.device, "device", "auto", deviceUsage)
}

// check reports an option that cannot generate as a usage error naming
// the flag.
func (g *genFlags) check() error {
	o := g.opts
	switch {
	case o.MaxTokens < 1:
		return usageError("invalid --tokens %d: want >= 1", o.MaxTokens)
	case o.TopK < 0:
		return usageError("invalid --top-k %d: want >= 0 (0 for no limit)", o.TopK)
	case !(o.TopP >= 0 && o.TopP <= 1):
		return usageError("invalid --top-p %g: want a value in [0, 1] (0 or 1 for no limit)", o.TopP)
	}
	if err := o.Validate(); err != nil {
		return usageError("invalid --temperature %g: want a finite value >= 0", o.Temperature)
	}
	return nil
}

func newChatCmd() *cobra.Command {
	var (
		src    generationSource
		system string
		gen    genFlags
	)
	cmd := &cobra.Command{
		Use:   "chat",
		Short: "Chat with a model in the terminal",
		Long: `chat talks with a model turn by turn: each line you type is a user message,
rendered with the model's own chat template (the one of its tokenizer files:
tokenizer_config.json or chat_template.jinja; the built-in format for runs
without one), and the reply is printed as it is generated, ending at the
model's end-of-turn token. The conversation is kept across turns, and the
model's key/value cache with it, so each turn reads only the new tokens.

Type /reset to start the conversation again, /exit or end the input (Ctrl-D)
to leave. Ctrl-C stops a reply being written.

` + checkpointRule("--from") + ` --from also takes a Hugging Face folder or a GGUF file.
--adapter chats with a fine-tune: its adapters applied to its base.`,
		Example: `  posttrainllm chat --from runs/smollm
  posttrainllm chat --from ~/models/SmolLM2-135M-Instruct --system "You are terse."
  posttrainllm chat --adapter runs/smollm-lora --temperature 0`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if src.from == "" && src.adapter == "" {
				return usageError("chat needs --from RUN: %s, a Hugging Face folder or a GGUF file", checkpointPaths)
			}
			if err := gen.check(); err != nil {
				return err
			}
			m, err := src.openOn("chat", gen.device)
			if err != nil {
				return err
			}
			defer m.Close()
			return chatLoop(cmd.InOrStdin(), cmd.OutOrStdout(), m.NewSession(system), gen.opts)
		},
	}
	cmd.Flags().StringVar(&src.from, "from", "", "run folder (its newest checkpoint), checkpoint directory, Hugging Face folder or GGUF file")
	cmd.Flags().StringVar(&src.adapter, "adapter", "", "fine-tune run folder or checkpoint whose adapters to apply (--from: its base, default the recorded one)")
	cmd.Flags().StringVar(&src.dtype, "dtype", "", dtypeUsage)
	cmd.Flags().StringVar(&system, "system", "", "system message the conversation starts with")
	gen.add(cmd, 512, 0.7)
	return cmd
}

// chatLoop reads user turns from in, one a line, and streams the replies
// to out until the input ends or says /exit. On a terminal it prompts
// with "> "; Ctrl-C interrupts a reply, not the program.
func chatLoop(in io.Reader, out io.Writer, s *generate.Session, opts generate.Options) error {
	defer s.Close()
	interactive := false
	if f, ok := in.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		interactive = true
	}
	lines := bufio.NewScanner(in)
	lines.Buffer(make([]byte, 0, 64<<10), 16<<20)
	system := s.Messages
	for {
		if interactive {
			fmt.Fprint(out, "> ")
		}
		if !lines.Scan() {
			if interactive {
				fmt.Fprintln(out)
			}
			return lines.Err()
		}
		line := strings.TrimSpace(lines.Text())
		switch line {
		case "":
			continue
		case "/exit", "/quit":
			return nil
		case "/reset":
			s.Close()
			s.Messages = append(s.Messages[:0:0], system...)
			fmt.Fprintln(out, "(conversation cleared)")
			continue
		}
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
		_, err := s.Send(ctx, line, opts, func(delta string) error {
			_, err := io.WriteString(out, delta)
			return err
		})
		stop()
		fmt.Fprintln(out)
		if errors.Is(err, context.Canceled) {
			fmt.Fprintln(out, "(reply interrupted)")
			continue
		}
		if err != nil {
			return err
		}
	}
}
