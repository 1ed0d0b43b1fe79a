// Command batchgenerate drives posttrainllm's batched generation engine
// from a Go program: many goroutines submit requests to one Engine at
// once, each reads its tokens from its stream as they are made, and the
// engine decodes them together (continuous batching), every row with its
// own sampling settings.
//
//	go run ./examples/batchgenerate -clients 16 -tokens 24
//
// The model is a small randomly initialised one, so the tokens are
// noise; the program checks what batching must keep: each request's
// tokens are the ones it gets alone, and the engine traced its decode step
// a handful of times however many steps it ran.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"sync"

	"github.com/posttrainllm/posttrainllm/generate"
	"github.com/posttrainllm/posttrainllm/mlx"
	"github.com/posttrainllm/posttrainllm/model"
)

func main() {
	clients := flag.Int("clients", 16, "goroutines submitting one request each")
	tokens := flag.Int("tokens", 24, "tokens per request")
	flag.Parse()
	if err := run(os.Stdout, *clients, *tokens); err != nil {
		fmt.Fprintln(os.Stderr, "batchgenerate:", err)
		os.Exit(1)
	}
}

func run(out io.Writer, clients, tokens int) error {
	net, err := model.New(model.Config{VocabSize: 512, DModel: 64, Layers: 2, Heads: 4, KVHeads: 2, Context: 256, MLP: "swiglu", InitStd: 0.3})
	if err != nil {
		return err
	}
	params, err := net.Init(1)
	if err != nil {
		return err
	}
	defer mlx.Free(params...)
	engine, err := generate.NewEngine(net, params, generate.EngineOptions{MaxBatch: 8})
	if err != nil {
		return err
	}
	defer engine.Close()

	// Request i: a prompt of its own length, greedy for even i, sampled
	// with its own seed for odd i.
	request := func(i int) generate.Sequence {
		prompt := make([]int32, 3+i%7)
		for k := range prompt {
			prompt[k] = int32((i*13 + k*5) % 512)
		}
		opts := generate.Options{Sampling: generate.Sampling{MaxTokens: tokens}}
		if i%2 == 1 {
			opts.Temperature, opts.TopP, opts.Seed = 0.9, 0.95, uint64(i)
		}
		return generate.Sequence{Prompt: prompt, Options: opts}
	}
	got := make([][]int32, clients)
	errs := make([]error, clients)
	var wg sync.WaitGroup
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			streams, err := engine.Submit(context.Background(), request(i))
			if err != nil {
				errs[i] = err
				return
			}
			for tok := range streams[0].Tokens { // as they are made
				got[i] = append(got[i], tok.ID)
			}
			_, errs[i] = streams[0].Wait()
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	for i := range clients {
		alone, err := engine.Generate(context.Background(), request(i))
		if err != nil {
			return err
		}
		if !slices.Equal(alone[0].Tokens, got[i]) {
			return fmt.Errorf("request %d: %v in the batch, %v alone", i, got[i], alone[0].Tokens)
		}
	}
	st := engine.Stats()
	fmt.Fprintf(out, "%d requests of %d tokens: %d decode steps, at most %d rows at once, %d traces; every request's tokens match it alone\n",
		clients, tokens, st.DecodeSteps, st.MaxRows, st.Traces)
	return nil
}
