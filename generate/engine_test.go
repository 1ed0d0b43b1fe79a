package generate

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"sync"
	"testing"

	"github.com/posttrainllm/posttrainllm/mlx"
	"github.com/posttrainllm/posttrainllm/model"
)

// engineFamilies are the shapes the engine is checked on: rotary positions
// with grouped-query attention and SwiGLU (Llama), and learned absolute
// positions with LayerNorm and biases (GPT-2), whose per-row positions
// take another path through the forward pass.
var engineFamilies = map[string]model.Config{
	"llama": {VocabSize: 300, DModel: 32, Layers: 2, Heads: 4, KVHeads: 2, Context: 160, MLP: "swiglu", InitStd: 0.4},
	"gpt2": {VocabSize: 300, DModel: 32, Layers: 2, Heads: 2, Context: 160, Norm: "layer", Bias: true,
		Positions: "learned", GELU: "tanh", InitStd: 0.4},
	// Qwen3's per-head q/k norms and a head width of its own, Llama 3's
	// scaled rotary frequencies (passed to RoPE as periods), a tied head.
	// Gemma 3: sliding-window layers (window 12, shorter than most
	// prompts and completions here) beside a global one, a second rotary
	// base, post-norms, GeGLU and scaled embeddings (the head untied: at
	// random init a head tied to √d-scaled embeddings repeats the last
	// token, and greedy rows would show nothing).
	"gemma3": {VocabSize: 300, DModel: 32, Layers: 3, Heads: 4, KVHeads: 1, HeadDimension: 16, Context: 160, MLPHidden: 40,
		MLP: "geglu", GELU: "tanh", QKNorm: true, PostNorms: true, EmbedScale: true, SlidingWindow: 12,
		SlidingPattern: 3, RoPEBase: 1e6, RoPELocalBase: 1e4, QueryScale: 16, InitStd: 0.4},
	"qwen3-llama3rope": {VocabSize: 300, DModel: 32, Layers: 2, Heads: 4, KVHeads: 1, HeadDimension: 16, QKNorm: true,
		Context: 160, MLP: "swiglu", TiedEmbeddings: true, RoPEType: "llama3", RoPEFactor: 8, RoPELowFreqFactor: 1,
		RoPEHighFreqFactor: 4, RoPEOriginalContext: 64, InitStd: 0.4},
}

func engineNet(t testing.TB, cfg model.Config) (*model.Transformer, []*mlx.Array) {
	t.Helper()
	net, err := model.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	params, err := net.Init(11)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mlx.Free(params...) })
	return net, params
}

func newEngine(t testing.TB, net *model.Transformer, params []*mlx.Array, opts EngineOptions) *Engine {
	t.Helper()
	e, err := NewEngine(net, params, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	return e
}

// mixedSequences are requests of ragged prompts and budgets with greedy,
// sampled, top-k and top-p rows, so rows finish at different steps.
func mixedSequences(vocab int) []Sequence {
	lengths := []int{3, 37, 1, 20, 64, 9, 15, 50}
	opts := []Sampling{
		{MaxTokens: 12},
		{MaxTokens: 30, Temperature: 1, Seed: 5},
		{MaxTokens: 7, Temperature: 0.8, TopK: 5, Seed: 9},
		{MaxTokens: 25, Temperature: 1.2, TopP: 0.7, Seed: 2},
		{MaxTokens: 18},
		{MaxTokens: 40, Temperature: 1, TopK: 20, TopP: 0.9, Seed: 77},
		{MaxTokens: 5, Temperature: 0.5, Seed: 1},
		{MaxTokens: 22},
	}
	seqs := make([]Sequence, len(lengths))
	for i, n := range lengths {
		prompt := make([]int32, n)
		for k := range prompt {
			prompt[k] = int32((i*31 + k*7 + 3) % vocab)
		}
		seqs[i] = Sequence{Prompt: prompt, Options: Options{Sampling: opts[i]}}
	}
	return seqs
}

// TestEngineRowsMatchAlone submits ragged requests to an engine of three
// rows (so rows join as others leave, prompts read in chunks of 8) and
// checks each completion against the same request run alone, and the
// greedy ones against the single-sequence decoder (Tokens), whose cache
// and positions are written independently.
func TestEngineRowsMatchAlone(t *testing.T) {
	for name, cfg := range engineFamilies {
		t.Run(name, func(t *testing.T) {
			net, params := engineNet(t, cfg)
			seqs := mixedSequences(cfg.VocabSize)
			busy := newEngine(t, net, params, EngineOptions{MaxBatch: 3, PrefillChunk: 8})
			streams := make([][]*Stream, len(seqs))
			for i, s := range seqs {
				var err error
				if streams[i], err = busy.Submit(context.Background(), s); err != nil {
					t.Fatal(err)
				}
			}
			alone := newEngine(t, net, params, EngineOptions{MaxBatch: 1})
			for i, s := range seqs {
				got, err := streams[i][0].Wait()
				if err != nil {
					t.Fatal(err)
				}
				var streamed []int32
				for tok := range streams[i][0].Tokens {
					streamed = append(streamed, tok.ID)
				}
				if !slices.Equal(streamed, got.Tokens) {
					t.Fatalf("request %d: streamed %v, completion %v", i, streamed, got.Tokens)
				}
				want, err := alone.Generate(context.Background(), s)
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(got.Tokens, want[0].Tokens) || got.FinishReason != want[0].FinishReason {
					t.Fatalf("request %d (%+v): in a batch %v (%s), alone %v (%s)", i, s.Options, got.Tokens, got.FinishReason, want[0].Tokens, want[0].FinishReason)
				}
				if len(got.Tokens) != s.MaxTokens || got.FinishReason != FinishLength {
					t.Fatalf("request %d: %d tokens (%s), want %d (length)", i, len(got.Tokens), got.FinishReason, s.MaxTokens)
				}
				if s.Temperature == 0 {
					ref, _, err := Tokens(context.Background(), net, params, s.Prompt, s.Options, nil)
					if err != nil {
						t.Fatal(err)
					}
					if !slices.Equal(got.Tokens, ref) {
						t.Fatalf("request %d greedy: engine %v, single-sequence decoder %v", i, got.Tokens, ref)
					}
					if len(got.Tokens) > 4 && slices.Equal(got.Tokens, slices.Repeat(got.Tokens[:1], len(got.Tokens))) {
						t.Fatalf("request %d greedy: one token over and over (%v): the comparison shows nothing", i, got.Tokens)
					}
				}
			}
			st := busy.Stats()
			if st.MaxRows != 3 || st.Traces == 0 || st.Traces > 16 || st.DecodeSteps < 4*st.Traces {
				t.Fatalf("stats %+v: want 3 rows at most, a handful of traces over many steps", st)
			}
		})
	}
}

// TestEngineLogprobs checks the sampled tokens' and the prompt's
// log-probabilities against log-softmax of the logits of one forward pass
// over the whole text, computed on the host in float64.
func TestEngineLogprobs(t *testing.T) {
	cfg := engineFamilies["llama"]
	net, params := engineNet(t, cfg)
	e := newEngine(t, net, params, EngineOptions{PrefillChunk: 5})
	prompt := []int32{4, 99, 12, 250, 7, 7, 31, 200, 3, 18, 64, 1}
	out, err := e.Generate(context.Background(), Sequence{Prompt: prompt, PromptLogprobs: true,
		Options: Options{Sampling: Sampling{MaxTokens: 10, Temperature: 1, Seed: 3}}})
	if err != nil {
		t.Fatal(err)
	}
	c := out[0]
	text := append(slices.Clone(prompt), c.Tokens...)
	logits := net.Logits(params, mlx.FromSlice(text, 1, len(text)))
	host, err := mlx.AsType(logits, mlx.Float32).Float32s()
	if err != nil {
		t.Fatal(err)
	}
	V := logits.Dim(2)
	logSoftmax := func(pos int, id int32) (lp float64, top int32, topLp float64) {
		row := host[pos*V : pos*V+cfg.VocabSize]
		mx := math.Inf(-1)
		for i, v := range row {
			if float64(v) > mx {
				mx, top = float64(v), int32(i)
			}
		}
		sum := 0.0
		for _, v := range row {
			sum += math.Exp(float64(v) - mx)
		}
		lz := mx + math.Log(sum)
		return float64(row[id]) - lz, top, mx - lz
	}
	if len(c.Prompt) != len(prompt) || c.Prompt[0].HasLogprobs {
		t.Fatalf("%d prompt scores (first %+v), want %d with none for position 0", len(c.Prompt), c.Prompt[0], len(prompt))
	}
	for i := 1; i < len(prompt); i++ {
		lp, top, topLp := logSoftmax(i-1, prompt[i])
		s := c.Prompt[i]
		if !s.HasLogprobs || math.Abs(float64(s.Logprob)-lp) > 1e-4 || s.Top != top || math.Abs(float64(s.TopLogprob)-topLp) > 1e-4 {
			t.Fatalf("prompt position %d: %+v, want logprob %.6f, top %d (%.6f)", i, s, lp, top, topLp)
		}
	}
	for i, id := range c.Tokens {
		lp, _, _ := logSoftmax(len(prompt)+i-1, id)
		if math.Abs(float64(c.Logprobs[i])-lp) > 1e-4 {
			t.Fatalf("token %d (%d): logprob %.6f, want %.6f", i, id, c.Logprobs[i], lp)
		}
	}
}

// TestEngineGroupReadsPromptOnce draws four completions of one prompt:
// the prompt is read once, the completions differ, and the first is the
// one a single request with the same seed draws.
func TestEngineGroupReadsPromptOnce(t *testing.T) {
	net, params := engineNet(t, engineFamilies["llama"])
	e := newEngine(t, net, params, EngineOptions{MaxBatch: 4})
	prompt := []int32{10, 20, 30, 40, 50, 60, 70}
	opts := Options{Sampling: Sampling{MaxTokens: 16, Temperature: 1.5, Seed: 42}}
	group, err := e.Generate(context.Background(), Sequence{Prompt: prompt, N: 4, Options: opts})
	if err != nil {
		t.Fatal(err)
	}
	if st := e.Stats(); st.Prefilled != int64(len(prompt)) {
		t.Fatalf("four completions read %d prompt tokens, want %d", st.Prefilled, len(prompt))
	}
	for i := range group {
		for j := range i {
			if slices.Equal(group[i].Tokens, group[j].Tokens) {
				t.Fatalf("completions %d and %d are the same: %v", i, j, group[i].Tokens)
			}
		}
	}
	single, err := e.Generate(context.Background(), Sequence{Prompt: prompt, Options: opts})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(single[0].Tokens, group[0].Tokens) {
		t.Fatalf("first of the group %v, alone %v", group[0].Tokens, single[0].Tokens)
	}
}

// TestEngineStopsAndCancels checks stop tokens, the model's context as a
// limit, Stop, and cancellation freeing a row for a waiting request.
func TestEngineStopsAndCancels(t *testing.T) {
	cfg := engineFamilies["llama"]
	net, params := engineNet(t, cfg)
	e := newEngine(t, net, params, EngineOptions{MaxBatch: 1})
	prompt := []int32{1, 2, 3}
	free, err := e.Generate(context.Background(), Sequence{Prompt: prompt, Options: Options{Sampling: Sampling{MaxTokens: 20}}})
	if err != nil {
		t.Fatal(err)
	}
	stop := free[0].Tokens[6]
	first := slices.Index(free[0].Tokens, stop)
	out, err := e.Generate(context.Background(), Sequence{Prompt: prompt, Options: Options{Sampling: Sampling{MaxTokens: 20}, StopTokens: []int32{stop}}})
	if err != nil || out[0].FinishReason != FinishStop || out[0].StopToken != stop || !slices.Equal(out[0].Tokens, free[0].Tokens[:first]) {
		t.Fatalf("stop token %d: %+v, %v; want %v, stop", stop, out, err, free[0].Tokens[:first])
	}
	long := make([]int32, cfg.Context-4)
	out, err = e.Generate(context.Background(), Sequence{Prompt: long, Options: Options{Sampling: Sampling{MaxTokens: 50}}})
	if err != nil || len(out[0].Tokens) != 4 || out[0].FinishReason != FinishLength {
		t.Fatalf("a prompt 4 short of the context: %d tokens (%s), %v; want 4 (length)", len(out[0].Tokens), out[0].FinishReason, err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	held, err := e.Submit(ctx, Sequence{Prompt: prompt, Options: Options{Sampling: Sampling{MaxTokens: 100}}})
	if err != nil {
		t.Fatal(err)
	}
	next, err := e.Submit(context.Background(), Sequence{Prompt: prompt, Options: Options{Sampling: Sampling{MaxTokens: 3}}})
	if err != nil {
		t.Fatal(err)
	}
	<-held[0].Tokens // the held request runs, the next one waits for its row
	cancel()
	if _, err := held[0].Wait(); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled request: %v, want context.Canceled", err)
	}
	if got, err := next[0].Wait(); err != nil || len(got.Tokens) != 3 {
		t.Fatalf("the request behind it: %+v, %v", got, err)
	}
	stopped, err := e.Submit(context.Background(), Sequence{Prompt: prompt, Options: Options{Sampling: Sampling{MaxTokens: 100}}})
	if err != nil {
		t.Fatal(err)
	}
	<-stopped[0].Tokens
	stopped[0].Stop()
	if got, err := stopped[0].Wait(); err != nil || got.FinishReason != FinishStop || len(got.Tokens) >= 100 {
		t.Fatalf("stopped: %d tokens (%s), %v", len(got.Tokens), got.FinishReason, err)
	}
	for _, bad := range []Sequence{
		{Options: Options{Sampling: Sampling{MaxTokens: 1}}},
		{Prompt: []int32{300}, Options: Options{Sampling: Sampling{MaxTokens: 1}}},
		{Prompt: prompt, N: 2, Options: Options{Sampling: Sampling{MaxTokens: 1}}},
		{Prompt: make([]int32, cfg.Context), Options: Options{Sampling: Sampling{MaxTokens: 1}}},
	} {
		if _, err := e.Submit(context.Background(), bad); err == nil {
			t.Fatalf("%+v was accepted", bad)
		}
	}
}

// TestEngineConcurrentSubmitters submits from many goroutines at once and
// checks every answer against the same request alone; then SetParams to
// other weights changes the answers.
func TestEngineConcurrentSubmitters(t *testing.T) {
	net, params := engineNet(t, engineFamilies["gpt2"])
	e := newEngine(t, net, params, EngineOptions{MaxBatch: 8})
	seqs := mixedSequences(300)
	want := make([][]int32, len(seqs))
	for i, s := range seqs {
		out, err := e.Generate(context.Background(), s)
		if err != nil {
			t.Fatal(err)
		}
		want[i] = out[0].Tokens
	}
	var wg sync.WaitGroup
	errs := make(chan error, 4*len(seqs))
	for range 4 {
		for i, s := range seqs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				out, err := e.Generate(context.Background(), s)
				if err == nil && !slices.Equal(out[0].Tokens, want[i]) {
					err = fmt.Errorf("request %d: %v, alone %v", i, out[0].Tokens, want[i])
				}
				if err != nil {
					errs <- err
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	other, err := net.Init(12)
	if err != nil {
		t.Fatal(err)
	}
	defer mlx.Free(other...)
	if err := e.SetParams(other); err != nil {
		t.Fatal(err)
	}
	out, err := e.Generate(context.Background(), seqs[0])
	if err != nil {
		t.Fatal(err)
	}
	if slices.Equal(out[0].Tokens, want[0]) {
		t.Fatalf("other parameters gave the same tokens %v", want[0])
	}
	if err := e.SetParams(params); err != nil {
		t.Fatal(err)
	}
}

// TestEngineSoak serves 10,000 short requests from concurrent clients,
// a tenth of them cancelled early: MLX's active memory does not grow with
// the requests served, only with the shapes traced.
func TestEngineSoak(t *testing.T) {
	net, params := engineNet(t, engineFamilies["llama"])
	e := newEngine(t, net, params, EngineOptions{MaxBatch: 8})
	const clients, total = 16, 10000
	run := func(from, to int) {
		var wg sync.WaitGroup
		next := make(chan int)
		for range clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range next {
					ctx, cancel := context.WithCancel(context.Background())
					seq := Sequence{Prompt: []int32{int32(i % 300), int32(i * 7 % 300), 5}, Options: Options{Sampling: Sampling{MaxTokens: 1 + i%4, Temperature: float64(i % 2), Seed: uint64(i)}}}
					streams, err := e.Submit(ctx, seq)
					if err != nil {
						t.Error(err)
						cancel()
						return
					}
					if i%10 == 3 {
						cancel()
					}
					if _, err := streams[0].Wait(); err != nil && !errors.Is(err, context.Canceled) {
						t.Error(err)
					}
					cancel()
				}
			}()
		}
		for i := from; i < to; i++ {
			next <- i
		}
		close(next)
		wg.Wait()
	}
	settled := func() uint64 {
		// Wait for the loop to go idle: it frees the cache when no row runs.
		for !e.stats.idle.Load() {
			runtime.Gosched()
		}
		return mlx.Memory().Active
	}
	// Phases of 500 requests: a phase that traces a new shape (whose
	// constants the compiled step keeps, a bounded cost of the first
	// requests with that shape) starts a new baseline; across every other
	// phase the active memory must not move, and at least half the requests
	// must be served so.
	const phase = 500
	base, traces, flat := settled(), e.Stats().Traces, 0
	for served := 0; served < total; served += phase {
		run(served, served+phase)
		mem, now := settled(), e.Stats().Traces
		switch {
		case now != traces:
			base, traces = mem, now
		case mem != base:
			t.Fatalf("active memory %d bytes after %d requests, %d before the last %d (no new trace)", mem, served+phase, base, phase)
		default:
			flat += phase
		}
	}
	if flat < total/2 {
		t.Fatalf("only %d of %d requests were served without a new trace", flat, total)
	}
	if st := e.Stats(); st.Queued != total || st.Traces > 12 {
		t.Fatalf("stats %+v: want %d requests and a handful of traces", st, total)
	}
}
