package generate

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/posttrainllm/posttrainllm/mlx"
	"github.com/posttrainllm/posttrainllm/model"
)

// EngineOptions configure an Engine. Zero values take the defaults.
type EngineOptions struct {
	// MaxBatch is the most sequences decoded together; requests beyond it
	// wait for a row to finish. Default: what DefaultMaxBatch allows.
	MaxBatch int
	// PrefillChunk is the most prompt tokens read between two decode
	// steps, so a long prompt does not stall the rows already decoding for
	// its whole length. Default 512.
	PrefillChunk int
	// Interpreted runs the decode step op by op instead of as one compiled
	// function: slower, the same tokens. For measuring and debugging.
	Interpreted bool
}

// Engine generates many sequences at once from one model: the batched
// generation that serving, evaluation and online RL rest on. Requests
// (Submit, from any goroutine) join the running batch between decode
// steps as soon as a row is free, their prompts read in chunks; each
// decode step feeds every running row one token and samples each row's
// next token with the row's own settings; a finished row frees its slot at
// once (continuous batching). K completions of one prompt read the prompt
// once and copy its keys and values. Each row's tokens are the ones it
// would get alone.
//
// The decode step is compiled; its shapes are bucketed (the number of
// slots and the cache's capacity each a power of two), so a run traces a
// handful of times (Stats.Traces). The engine uses the parameters it is
// given without copying them: SetParams points it at new ones, as a
// training step that updates them in turn does.
//
// LoRA and DoRA adapters of the model (SetAdapter) serve the requests
// that name them (Sequence.Adapter) beside the base's: rows of different
// adapters share the decode step, each projected through its own
// adapter, the tokens those of the adapter merged into the weights. A
// step with adapter rows is a compiled function of its own.
type Engine struct {
	net  *model.Transformer
	opts EngineOptions

	mu      sync.Mutex
	queue   []*job
	params  []*mlx.Array
	closed  bool
	wake    chan struct{}
	swapped chan error   // answers SetParams once the loop took the new parameters
	pending []*mlx.Array // parameters handed over by SetParams, not yet taken
	done    chan struct{}
	// adapterNames are the adapters Submit accepts; adapterOps the
	// SetAdapter and RemoveAdapter calls the loop has not taken yet.
	adapterNames map[string]bool
	adapterOps   []adapterOp

	stats engineCounters
	loop  *batch // the loop's state, touched by the loop goroutine alone
}

// DefaultPrefillChunk is EngineOptions.PrefillChunk's default.
const DefaultPrefillChunk = 512

// NewEngine starts an engine over net with params (which it does not own
// or free). Close it when done.
func NewEngine(net *model.Transformer, params []*mlx.Array, opts EngineOptions) (*Engine, error) {
	if len(params) != len(net.Specs) {
		return nil, fmt.Errorf("generate: engine: %d parameter arrays, the model has %d", len(params), len(net.Specs))
	}
	if opts.MaxBatch < 0 || opts.PrefillChunk < 0 {
		return nil, fmt.Errorf("generate: engine: max batch %d, prefill chunk %d; want values >= 1 (0 for the default)", opts.MaxBatch, opts.PrefillChunk)
	}
	if opts.MaxBatch == 0 {
		opts.MaxBatch = DefaultMaxBatch(net.Config, 0)
	}
	if opts.PrefillChunk == 0 {
		opts.PrefillChunk = DefaultPrefillChunk
	}
	e := &Engine{net: net, opts: opts, params: params, wake: make(chan struct{}, 1), done: make(chan struct{}),
		adapterNames: map[string]bool{}}
	e.loop = newBatch(e)
	go e.run()
	return e, nil
}

// Options returns the engine's options with the defaults filled in.
func (e *Engine) Options() EngineOptions { return e.opts }

// Sequence is one generation request to an Engine.
type Sequence struct {
	// Prompt is the tokens generation continues; at least one.
	Prompt []int32
	// N is how many completions to draw from the prompt (default 1): they
	// read the prompt once. Completion i samples from stream i of Seed.
	N int
	Options
	// PromptLogprobs asks for the log-probability of each prompt token
	// given the ones before it, and the most likely token at each
	// position (Completion.Prompt), as evaluation scores prompts.
	PromptLogprobs bool
	// Adapter names the adapter (Engine.SetAdapter) the completions are
	// generated with; empty for the base model.
	Adapter string
}

// Token is one generated token with its log-probability under the model
// (the softmax of its logits at temperature 1).
type Token struct {
	ID      int32
	Logprob float32
	// Top is the most likely token at that step (ID itself for a greedy
	// row), TopLogprob its log-probability.
	Top        int32
	TopLogprob float32
}

// PromptScore is what the model thought of one prompt position: the
// log-probability of the prompt's token there given the ones before it,
// and the most likely token with its log-probability.
type PromptScore struct {
	Logprob     float32
	Top         int32
	TopLogprob  float32
	HasLogprobs bool // false for the first position, which has no context
}

// Completion is a finished completion.
type Completion struct {
	Tokens   []int32
	Logprobs []float32
	// Top and TopLogprobs are the most likely tokens and their
	// log-probabilities, step by step.
	Top          []int32
	TopLogprobs  []float32
	FinishReason FinishReason
	// StopToken is the stop token that ended it (not in Tokens), -1 for
	// none, and StopLogprob its log-probability (online RL trains the
	// model to stop).
	StopToken   int32
	StopLogprob float32
	// Prompt scores each prompt position when PromptLogprobs was asked.
	Prompt []PromptScore
}

// Stream is one completion of a submitted Sequence in progress. Tokens
// receives its tokens as they are made and is closed when it ends; it is
// buffered for the whole completion, so a reader that falls behind (or
// never reads) holds up no other row. Wait returns the completion.
type Stream struct {
	Tokens <-chan Token
	tokens chan Token
	stop   atomic.Bool
	done   chan struct{}
	result Completion
	err    error
}

// Wait blocks until the completion ends and returns it, or the error that
// ended it (the request's context's error when it was cancelled).
func (s *Stream) Wait() (Completion, error) {
	mlx.Await(s.done)
	return s.result, s.err
}

// Stop ends the completion at the next decode step with FinishStop, as
// for a stop string the caller found in its text; its row is freed.
func (s *Stream) Stop() { s.stop.Store(true) }

// job is a submitted Sequence: its streams and options, the vocabulary
// limits checked.
type job struct {
	seq     Sequence
	streams []*Stream
	ctx     context.Context
	order   int64 // arrival: rows read their prompts in this order
}

// ErrEngineClosed is returned by Submit after Close.
var ErrEngineClosed = errors.New("generate: the engine is closed")

// Submit queues seq and returns one stream per completion (seq.N of
// them). ctx cancels the request: waiting or running, its rows are freed
// at the next step and Wait returns ctx's error. It returns at once; the
// engine works in the background.
func (e *Engine) Submit(ctx context.Context, seq Sequence) ([]*Stream, error) {
	if err := e.check(&seq); err != nil {
		return nil, err
	}
	if ctx == nil {
		ctx = context.Background()
	}
	j := &job{seq: seq, ctx: ctx, streams: make([]*Stream, seq.N)}
	for i := range j.streams {
		ch := make(chan Token, seq.MaxTokens)
		j.streams[i] = &Stream{Tokens: ch, tokens: ch, done: make(chan struct{}), result: Completion{StopToken: -1}}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil, ErrEngineClosed
	}
	if seq.Adapter != "" && !e.adapterNames[seq.Adapter] {
		return nil, fmt.Errorf("generate: no adapter %q on this engine; it has %s (SetAdapter registers one, the empty name is the base)",
			seq.Adapter, describeNames(e.adapterList()))
	}
	j.order = e.stats.queued.Add(1)
	e.queue = append(e.queue, j)
	e.signal()
	// A request cancelled while nothing else runs still has to be seen.
	context.AfterFunc(ctx, func() {
		e.mu.Lock()
		e.signal()
		e.mu.Unlock()
	})
	return j.streams, nil
}

// check validates seq and fills its defaults.
func (e *Engine) check(seq *Sequence) error {
	if err := seq.Options.Validate(); err != nil {
		return err
	}
	c := e.net.Config
	if len(seq.Prompt) == 0 {
		return fmt.Errorf("generate: empty prompt; give at least one token")
	}
	if len(seq.Prompt) >= c.Context {
		return fmt.Errorf("generate: a prompt of %d tokens leaves no room in the model's context of %d", len(seq.Prompt), c.Context)
	}
	for i, id := range seq.Prompt {
		if id < 0 || int(id) >= c.VocabSize {
			return fmt.Errorf("generate: prompt token %d is id %d, outside the vocabulary [0, %d)", i, id, c.VocabSize)
		}
	}
	if seq.N == 0 {
		seq.N = 1
	}
	if seq.N < 0 || seq.N > e.opts.MaxBatch {
		return fmt.Errorf("generate: %d completions of one prompt; want 1 to the engine's max batch, %d", seq.N, e.opts.MaxBatch)
	}
	return nil
}

// Generate runs seq to the end and returns its completions: Submit and
// Wait for each.
func (e *Engine) Generate(ctx context.Context, seq Sequence) ([]Completion, error) {
	streams, err := e.Submit(ctx, seq)
	if err != nil {
		return nil, err
	}
	out := make([]Completion, len(streams))
	for i, s := range streams {
		if out[i], err = s.Wait(); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// SetParams points the engine at new parameters (of the same model) from
// its next step on, and returns once the engine has taken them: from then
// on it no longer reads the old ones, which the caller may free. Rows
// running at the time continue with the new parameters. DoRA adapters'
// magnitude scales are computed again over the new weights.
func (e *Engine) SetParams(params []*mlx.Array) error {
	if len(params) != len(e.net.Specs) {
		return fmt.Errorf("generate: engine: %d parameter arrays, the model has %d", len(params), len(e.net.Specs))
	}
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return ErrEngineClosed
	}
	ack := make(chan error, 1)
	e.pending, e.swapped = params, ack
	e.signal()
	e.mu.Unlock()
	return mlx.Await(ack)
}

// Close ends every request still waiting or running (their Wait returns
// ErrEngineClosed), frees the engine's caches and returns when its loop
// has stopped. Closing twice is a no-op.
func (e *Engine) Close() {
	e.mu.Lock()
	if !e.closed {
		e.closed = true
		e.signal()
	}
	e.mu.Unlock()
	mlx.Await(e.done)
}

// signal wakes the loop; call with e.mu held.
func (e *Engine) signal() {
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

// taken is what the loop takes from the callers each round.
type taken struct {
	jobs   []*job
	params []*mlx.Array // new parameters, nil for none
	ack    chan error   // answers SetParams
	ops    []adapterOp
	closed bool
}

// take returns the jobs waiting, new parameters with the channel that
// acknowledges them, the adapter changes and whether the engine is
// closing.
func (e *Engine) take() taken {
	e.mu.Lock()
	defer e.mu.Unlock()
	t := taken{jobs: e.queue, params: e.pending, ack: e.swapped, ops: e.adapterOps, closed: e.closed}
	e.queue, e.pending, e.swapped, e.adapterOps = nil, nil, nil, nil
	return t
}

// requeue puts jobs that found no free rows back at the head of the queue.
func (e *Engine) requeue(jobs []*job) {
	if len(jobs) == 0 {
		return
	}
	e.mu.Lock()
	e.queue = append(slices.Clone(jobs), e.queue...)
	e.mu.Unlock()
}

// run is the engine's loop: admit, prefill, decode, until closed.
func (e *Engine) run() {
	defer close(e.done)
	b := e.loop
	defer b.free()
	for {
		t := e.take()
		if t.params != nil {
			e.params = t.params
			t.ack <- b.rebuildAdapters(e.params)
		}
		if t.closed {
			b.fail(append(t.jobs, b.waiting...), ErrEngineClosed)
			for _, op := range t.ops {
				op.done <- ErrEngineClosed
			}
			return
		}
		b.waiting = append(b.waiting, t.jobs...)
		for _, op := range t.ops {
			op.done <- b.applyAdapter(op, e.params)
		}
		worked, err := b.step(e.params)
		if err != nil {
			b.failAll(fmt.Errorf("generate: engine: %w", err))
		}
		if !worked {
			e.stats.idle.Store(true)
			<-e.wake
			e.stats.idle.Store(false)
		}
	}
}

// DefaultMaxBatch is how many sequences of the model's whole context the
// key/value cache fits in budget bytes (0: a quarter of the device's
// memory as MLX reports it, or 8 GiB where it reports none), between 1
// and 64.
func DefaultMaxBatch(c model.Config, budget uint64) int {
	if budget == 0 {
		budget = 8 << 30
		if mem, err := mlx.DefaultDevice().Memory(); err == nil && mem > 0 {
			budget = mem / 4
		}
	}
	perRow := uint64(c.KVBytesPerToken()) * uint64(c.Context)
	return int(min(64, max(1, budget/max(perRow, 1))))
}

// engineCounters are the engine's running totals (Stats).
type engineCounters struct {
	queued, traces, steps, decoded, prefilled, rearranged atomic.Int64
	maxRows                                               atomic.Int64
	idle                                                  atomic.Bool // the loop waits for work, its cache freed
}

// EngineStats are an engine's totals since it started.
type EngineStats struct {
	Queued      int64 // sequences submitted
	Traces      int64 // times the decode step was traced (once per shape bucket)
	DecodeSteps int64 // decode steps run
	Decoded     int64 // tokens generated by decode steps (every row's)
	Prefilled   int64 // prompt tokens read
	Rearranged  int64 // times the cache was grown or shrunk
	MaxRows     int64 // the most rows decoded in one step
}

// Stats returns the engine's totals so far.
func (e *Engine) Stats() EngineStats {
	s := &e.stats
	return EngineStats{Queued: s.queued.Load(), Traces: s.traces.Load(), DecodeSteps: s.steps.Load(),
		Decoded: s.decoded.Load(), Prefilled: s.prefilled.Load(), Rearranged: s.rearranged.Load(), MaxRows: s.maxRows.Load()}
}
