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
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/posttrainllm/posttrainllm/data"
	"github.com/posttrainllm/posttrainllm/generate"
	"github.com/posttrainllm/posttrainllm/serve"
)

// modelBackend is the serve.Backend of a generate.Model, its requests
// batched by one engine, and the serve.AdapterBackend of the adapters
// registered on the engine under the names adapters lists.
type modelBackend struct {
	id       string
	m        *generate.Model
	e        *generate.Engine
	adapters []string
}

// Adapters are the model ids of the adapters served beside the model.
func (b *modelBackend) Adapters() []string { return b.adapters }

// Concurrency is the engine's batch.
func (b *modelBackend) Concurrency() int { return b.e.Options().MaxBatch }

// VocabSize is the model's vocabulary.
func (b *modelBackend) VocabSize() int { return b.m.Net.Config.VocabSize }

// TokenText is the text of token id.
func (b *modelBackend) TokenText(id int32) string { return b.m.Tokenizer.Decode([]int32{id}) }

// DecodeText is the text of ids.
func (b *modelBackend) DecodeText(ids []int32) string { return b.m.Tokenizer.Decode(ids) }

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
	s := p.Sampling
	if !p.HasSeed {
		s.Seed = rand.Uint64()
	}
	req := generate.EngineRequest{Prompt: prompt, Options: generate.Options{Sampling: s}, ScorePrompt: p.Echo && p.Logprobs, Adapter: p.Adapter}
	res, err := b.m.GenerateOn(ctx, b.e, req, func(text string) error {
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
	gen := serve.Generation{Tokens: n, Finish: string(res.FinishReason)}
	if p.Logprobs {
		for i, id := range res.Tokens {
			gen.Logprobs = append(gen.Logprobs, serve.TokenLogprob{ID: id, Top: res.Top[i], Logprob: float64(res.Logprobs[i]),
				TopLogprob: float64(res.TopLogprobs[i]), Scored: true})
		}
		for i, s := range res.Prompt {
			gen.Prompt = append(gen.Prompt, serve.TokenLogprob{ID: prompt[i], Top: s.Top, Logprob: float64(s.Logprob),
				TopLogprob: float64(s.TopLogprob), Scored: s.HasLogprobs})
		}
	}
	return gen, nil
}

// drainTimeout is how long serve lets requests in progress finish after
// SIGINT or SIGTERM before it cancels them.
const drainTimeout = 30 * time.Second

// serveModel returns the HTTP server of backend b and its drain function:
// drain(timeout) stops taking connections, lets the requests in progress
// finish for up to timeout, cancels the rest (their generations stop at
// the next token) and returns once no handler runs, so the model can be
// closed. Later calls wait for the first one to end.
func serveModel(b serve.Backend, opts serve.Options) (*http.Server, func(time.Duration)) {
	base, cancel := context.WithCancel(context.Background())
	var (
		running sync.WaitGroup
		once    sync.Once
		done    = make(chan struct{})
	)
	h := serve.New(b, opts)
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			running.Add(1)
			defer running.Done()
			h.ServeHTTP(w, r)
		}),
		BaseContext:       func(net.Listener) context.Context { return base },
		ReadHeaderTimeout: 10 * time.Second,
	}
	drain := func(timeout time.Duration) {
		once.Do(func() {
			go func() {
				defer close(done)
				shut, stop := context.WithTimeout(context.Background(), timeout)
				defer stop()
				_ = srv.Shutdown(shut)
				cancel()
				running.Wait()
			}()
		})
		<-done
	}
	return srv, drain
}

func newServeCmd() *cobra.Command {
	var (
		src          generationSource
		addr, id     string
		device       string
		maxQueue     int
		defaultToken int
		engineOpts   generate.EngineOptions
		adapterFlags []string
	)
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Answer the OpenAI HTTP API with a model",
		Long: `serve answers GET /v1/models, POST /v1/completions and POST
/v1/chat/completions (streamed or not) with a model: chat messages go through
its own chat template, and replies stop at its end tokens (docs/chat.md).
Requests are batched: up to --max-batch generate together (continuous
batching: a request joins as soon as a row is free, and a client that
leaves frees its row at once); the others wait, up to --max-queue of them,
beyond which requests are answered 503. /v1/completions takes prompts as
text or as token ids and answers logprobs (0 or 1) and echo, as evaluation
harnesses such as lm-eval's local-completions ask. It prints the address
it listens on. On SIGINT (Ctrl-C) or SIGTERM it stops taking
requests, lets those in progress finish (at most 30 s) and exits 0.
It listens on loopback by default: --addr 0.0.0.0:PORT answers anyone
who can reach the machine, without authentication.

` + checkpointRule("--from") + ` --from also takes a Hugging Face folder or a GGUF file.
--adapter RUN serves a fine-tune: its adapters merged into its base.
--adapter NAME=RUN (repeatable) serves LoRA or DoRA fine-tunes of the --from
model beside it, without merging: a request whose "model" is NAME generates
with that adapter, the base's id or none with the base, and rows of
different adapters decode in the same batch; /v1/models lists them all
(docs/serving.md). Without --from the base is the one the first adapter's
fine-tune recorded.`,
		Example: `  posttrainllm serve --from runs/smollm
  posttrainllm serve --from ~/models/SmolLM2-135M-Instruct --addr 127.0.0.1:8000 --model smollm2
  posttrainllm serve --from ~/models/SmolLM2-135M-Instruct.Q4_1.gguf
  posttrainllm serve --from runs/smollm --adapter poet=runs/poet-lora --adapter coder=runs/coder-dora`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			merged, adapters, err := parseServeAdapters(adapterFlags)
			if err != nil {
				return err
			}
			src.adapter = merged
			if src.from == "" && len(adapters) > 0 {
				src.from = adapters[0].base
			}
			if src.from == "" && src.adapter == "" {
				return usageError("serve needs --from RUN: %s, a Hugging Face folder or a GGUF file", checkpointPaths)
			}
			if err := src.check("serve"); err != nil {
				return err
			}
			if id == "" {
				id = strings.TrimSuffix(filepath.Base(filepath.Clean(src.from)), ".gguf")
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
			runs, freeRuns, err := loadServeAdapters(m, id, adapters)
			if err != nil {
				ln.Close()
				return err
			}
			defer freeRuns()
			e, err := m.NewEngine(engineOpts)
			if err != nil {
				ln.Close()
				return usageError("%v", err)
			}
			defer e.Close()
			names, err := setServeAdapters(e, adapters, runs)
			if err != nil {
				ln.Close()
				return err
			}
			srv, drained := serveModel(&modelBackend{id: id, m: m, e: e, adapters: names}, serve.Options{MaxQueue: maxQueue, CompletionMaxTokens: defaultToken})
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			go func() {
				<-ctx.Done()
				fmt.Fprintf(cmd.ErrOrStderr(), "stopping: finishing the requests in progress (at most %s)\n", drainTimeout)
				drained(drainTimeout)
			}()
			served := id
			if len(names) > 0 {
				served += " with adapters " + strings.Join(names, ", ")
			}
			fmt.Fprintf(cmd.OutOrStdout(), "serving %s on http://%s\n", served, ln.Addr())
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				return err
			}
			drained(0) // waits for the drain started by the signal
			return nil
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&src.from, "from", "", "run folder (its newest checkpoint), checkpoint directory, Hugging Face folder or GGUF file")
	fs.StringArrayVar(&adapterFlags, "adapter", nil, "RUN: a fine-tune served with its adapters merged (--from: its base, default the recorded one); NAME=RUN, repeatable: a LoRA or DoRA fine-tune of the --from model served per request under the model id NAME")
	fs.StringVar(&addr, "addr", "127.0.0.1:8080", "address to listen on (port 0: any free port, printed); 0.0.0.0:PORT answers anyone who can reach this machine, with no authentication")
	fs.StringVar(&id, "model", "", "the model id the API lists and accepts (default: the folder's or file's name, without .gguf)")
	fs.IntVar(&maxQueue, "max-queue", 64, "requests that may wait while the batch is full; more get 503")
	fs.IntVar(&engineOpts.MaxBatch, "max-batch", 0, "most requests generated together (0: as many sequences of the whole context as a quarter of the device's memory holds, at most 64)")
	fs.IntVar(&engineOpts.PrefillChunk, "prefill-chunk", generate.DefaultPrefillChunk, "most prompt tokens read between two decode steps, so a long prompt does not stall the others")
	fs.IntVar(&defaultToken, "completion-tokens", 16, "/v1/completions' max_tokens when a request gives none")
	fs.StringVar(&device, "device", "auto", deviceUsage)
	fs.StringVar(&src.dtype, "dtype", "", dtypeUsage)
	return cmd
}
