package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/posttrainllm/posttrainllm/data"
	"github.com/posttrainllm/posttrainllm/generate"
	"github.com/posttrainllm/posttrainllm/serve"
)

// modelBackend is the serve.Backend of a generate.Model.
type modelBackend struct {
	id string
	m  *generate.Model
}

// Model is the id the server lists and accepts.
func (b *modelBackend) Model() string { return b.id }

// ContextLength is the model's context.
func (b *modelBackend) ContextLength() int { return b.m.ContextLength() }

// EncodePrompt reads special tokens written in text as their ids; ""
// is the end-of-text token.
func (b *modelBackend) EncodePrompt(text string) ([]int32, error) {
	ids := b.m.EncodePrompt(text)
	if len(ids) == 0 {
		ids = []int32{b.m.Tokenizer.EOT()}
	}
	return ids, nil
}

// EncodeChat renders messages through the model's template.
func (b *modelBackend) EncodeChat(messages []data.Message) ([]int32, error) {
	return b.m.ChatPrompt(messages)
}

// Generate continues prompt, handing text to emit until it says stop. A
// request without a seed samples with a fresh random one.
func (b *modelBackend) Generate(ctx context.Context, prompt []int32, p serve.Params, emit func(string) bool) (serve.Generation, error) {
	seed := uint64(p.Seed)
	if !p.HasSeed {
		seed = rand.Uint64()
	}
	opts := generate.Options{MaxTokens: p.MaxTokens, Temperature: p.Temperature, TopP: p.TopP, Seed: seed}
	res, err := b.m.GenerateTokens(ctx, prompt, opts, nil, func(text string) error {
		if !emit(text) {
			return generate.ErrStop
		}
		return nil
	})
	if err != nil {
		return serve.Generation{}, err
	}
	n := res.CompletionTokens
	if res.StopToken >= 0 {
		n++
	}
	return serve.Generation{Tokens: n, Finish: string(res.FinishReason)}, nil
}

func newServeCmd() *cobra.Command {
	var (
		src          generationSource
		addr, id     string
		device       string
		maxQueue     int
		defaultToken int
	)
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Answer the OpenAI HTTP API with a model",
		Long: `serve answers GET /v1/models, POST /v1/completions and POST
/v1/chat/completions (streamed or not) with a model: chat messages go through
its own chat template, and replies stop at its end tokens (docs/chat.md).
One generation runs at a time; the others wait their turn. It prints the
address it listens on, and stops on SIGINT or SIGTERM.

` + checkpointRule("--from") + ` --from also takes a Hugging Face folder.
--adapter serves a fine-tune: its adapters applied to its base.`,
		Example: `  posttrainllm serve --from runs/smollm
  posttrainllm serve --from ~/models/SmolLM2-135M-Instruct --addr 127.0.0.1:8000 --model smollm2`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if src.from == "" && src.adapter == "" {
				return usageError("serve needs --from RUN: %s, or a Hugging Face folder", checkpointPaths)
			}
			if err := src.check("serve"); err != nil {
				return err
			}
			if id == "" {
				id = filepath.Base(filepath.Clean(src.from))
				if src.adapter != "" {
					id = filepath.Base(filepath.Clean(src.adapter))
				}
			}
			dev, err := pickDevice(device, "cpu", "")
			if err != nil {
				return err
			}
			ln, err := net.Listen("tcp", addr)
			if err != nil {
				return usageError("invalid --addr %s: %v", addr, err)
			}
			m, err := src.open(dev)
			if err != nil {
				ln.Close()
				return err
			}
			defer m.Close()
			srv := &http.Server{Handler: serve.New(&modelBackend{id: id, m: m}, serve.Options{MaxQueue: maxQueue, CompletionMaxTokens: defaultToken}),
				ReadHeaderTimeout: 10 * time.Second}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			go func() {
				<-ctx.Done()
				shut, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				srv.Shutdown(shut)
			}()
			fmt.Fprintf(cmd.OutOrStdout(), "serving %s on http://%s\n", id, ln.Addr())
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				return err
			}
			return nil
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&src.from, "from", "", "run folder (its newest checkpoint), checkpoint directory or Hugging Face folder")
	fs.StringVar(&src.adapter, "adapter", "", "fine-tune run folder or checkpoint whose adapters to apply (--from: its base, default the recorded one)")
	fs.StringVar(&addr, "addr", "127.0.0.1:8080", "address to listen on (port 0: any free port, printed)")
	fs.StringVar(&id, "model", "", "the model id the API lists and accepts (default: the folder's name)")
	fs.IntVar(&maxQueue, "max-queue", 64, "requests that may wait while one generates; more get 503")
	fs.IntVar(&defaultToken, "completion-tokens", 16, "/v1/completions' max_tokens when a request gives none")
	fs.StringVar(&device, "device", "auto", deviceUsage)
	return cmd
}
