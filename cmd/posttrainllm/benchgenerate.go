package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/posttrainllm/posttrainllm/generate"
)

// generateBench are bench --generate's flags.
type generateBench struct {
	src          generationSource
	streams      []int
	promptTokens int
	genTokens    int
	rounds       int
	maxBatch     int
}

// generateRow is one measured configuration of bench --generate.
type generateRow struct {
	Path    string `json:"path"` // "sequence" (the one-sequence decoder) or "engine"
	Streams int    `json:"streams"`
	Round   int    `json:"round"`
	// PromptTokensPerS is the prompt tokens read per second until the
	// first generated token (time to first token), over every stream.
	PromptTokensPerS float64 `json:"prompt_tokens_per_s"`
	// GenTokensPerS is the generated tokens per second after each
	// stream's first, over every stream.
	GenTokensPerS float64 `json:"gen_tokens_per_s"`
	TTFTms        float64 `json:"ttft_ms"` // mean time to first token
	WallS         float64 `json:"wall_s"`
	Traces        int64   `json:"traces"` // the engine's traces so far
}

// runGenerateBench times generation from b.src on device: the
// one-sequence decoder (Model.GenerateTokens) on one stream, and the
// batched engine on each count of concurrent streams, every stream a
// prompt of random tokens and a fixed budget of greedy tokens (no stop
// tokens, so every stream generates all of them). An untimed pass of
// each configuration comes first (traces, kernel compilation).
func runGenerateBench(out io.Writer, b generateBench, device string, asJSON bool) error {
	if b.promptTokens < 1 || b.genTokens < 2 || b.rounds < 1 || len(b.streams) == 0 {
		return usageError("bench --generate: --prompt-tokens %d, --gen-tokens %d, --rounds %d, --streams %v; want >= 1, >= 2, >= 1 and at least one count",
			b.promptTokens, b.genTokens, b.rounds, b.streams)
	}
	for _, n := range b.streams {
		if n < 1 {
			return usageError("invalid --streams %d: want counts >= 1", n)
		}
	}
	m, err := b.src.openOn("bench", device)
	if err != nil {
		return err
	}
	defer m.Close()
	if b.promptTokens+b.genTokens > m.ContextLength() {
		return usageError("--prompt-tokens %d + --gen-tokens %d exceed the model's context of %d", b.promptTokens, b.genTokens, m.ContextLength())
	}
	maxBatch := b.maxBatch
	if maxBatch == 0 {
		maxBatch = slices.Max(b.streams)
	}
	e, err := m.NewEngine(generate.EngineOptions{MaxBatch: maxBatch})
	if err != nil {
		return usageError("%v", err)
	}
	defer e.Close()
	rng := rand.New(rand.NewPCG(1, 2))
	prompt := func() []int32 {
		p := make([]int32, b.promptTokens)
		for i := range p {
			p[i] = int32(rng.IntN(m.Net.Config.VocabSize))
		}
		return p
	}
	opts := generate.Options{Sampling: generate.Sampling{MaxTokens: b.genTokens}}
	sequence := func(round int, timed bool) (generateRow, error) {
		p := prompt()
		start := time.Now()
		var first time.Duration
		_, _, err := generate.Tokens(context.Background(), m.Net, m.Params, p, opts, func(int32) error {
			if first == 0 {
				first = time.Since(start)
			}
			return nil
		})
		wall := time.Since(start)
		return generateRow{Path: "sequence", Streams: 1, Round: round, PromptTokensPerS: float64(len(p)) / first.Seconds(),
			GenTokensPerS: float64(b.genTokens-1) / (wall - first).Seconds(), TTFTms: ms(first), WallS: wall.Seconds()}, err
	}
	engine := func(streams, round int) (generateRow, error) {
		start := time.Now()
		firsts := make([]time.Duration, streams)
		ends := make([]time.Duration, streams)
		var wg sync.WaitGroup
		errs := make([]error, streams)
		for i := range streams {
			ss, err := e.Submit(context.Background(), generate.Sequence{Prompt: prompt(), Options: opts})
			if err != nil {
				return generateRow{}, err
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range ss[0].Tokens {
					if firsts[i] == 0 {
						firsts[i] = time.Since(start)
					}
				}
				ends[i] = time.Since(start)
				_, errs[i] = ss[0].Wait()
			}()
		}
		wg.Wait()
		wall := time.Since(start)
		var ttft, lastFirst time.Duration
		for _, f := range firsts {
			ttft += f
			lastFirst = max(lastFirst, f)
		}
		row := generateRow{Path: "engine", Streams: streams, Round: round,
			PromptTokensPerS: float64(streams*b.promptTokens) / lastFirst.Seconds(),
			GenTokensPerS:    float64(streams*(b.genTokens-1)) / (wall - ttft/time.Duration(streams)).Seconds(),
			TTFTms:           ms(ttft / time.Duration(streams)), WallS: wall.Seconds(), Traces: e.Stats().Traces}
		for _, err := range errs {
			if err != nil {
				return row, err
			}
		}
		return row, nil
	}
	// Untimed: trace every bucket and compile the CPU's kernels.
	if _, err := sequence(0, false); err != nil {
		return err
	}
	for _, n := range b.streams {
		if _, err := engine(n, 0); err != nil {
			return err
		}
	}
	var rows []generateRow
	for round := 1; round <= b.rounds; round++ {
		r, err := sequence(round, true)
		if err != nil {
			return err
		}
		rows = append(rows, r)
		for _, n := range b.streams {
			if r, err = engine(n, round); err != nil {
				return err
			}
			rows = append(rows, r)
		}
	}
	if asJSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(rows)
	}
	c := m.Net.Config
	per := c.KVBytesPerToken()
	fmt.Fprintf(out, "kv cache: %d bytes per token per row (32 rows × 1,024 tokens: %.1f MiB); the memory plan's default batch at context %d: %d rows\n",
		per, float64(32*1024*per)/(1<<20), c.Context, generate.DefaultMaxBatch(c, 0))
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "round\tpath\tstreams\tprompt tok/s\tgen tok/s\tTTFT ms\twall s\ttraces\t\n")
	for _, r := range rows {
		fmt.Fprintf(tw, "%d\t%s\t%d\t%.1f\t%.1f\t%.1f\t%.2f\t%d\t\n", r.Round, r.Path, r.Streams, r.PromptTokensPerS, r.GenTokensPerS, r.TTFTms, r.WallS, r.Traces)
	}
	return tw.Flush()
}

// ms is d in milliseconds.
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
