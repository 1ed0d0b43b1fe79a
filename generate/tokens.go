package generate

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"time"

	"github.com/posttrainllm/posttrainllm/mlx"
	"github.com/posttrainllm/posttrainllm/model"
)

// Sampling is how a generation draws its tokens and how many it may
// draw: the settings every way of generating shares (Options and the
// engine's Sequence through it, runfolder.SampleOptions, serve.Params),
// defined and checked (Validate) in one place so that they cannot drift
// apart.
type Sampling struct {
	MaxTokens   int     // the most tokens to generate
	Temperature float64 // 0 picks the most likely token (greedy)
	TopK        int     // sample among the k most likely tokens; 0 for all
	// TopP samples among the most likely tokens whose probabilities add up
	// to at least TopP (nucleus sampling, after TopK); 0 or 1 for all.
	TopP float64
	Seed uint64 // the same seed, prompt and settings give the same tokens
}

// Validate reports a setting that cannot generate.
func (s Sampling) Validate() error {
	if s.MaxTokens < 1 {
		return fmt.Errorf("max tokens = %d, want >= 1", s.MaxTokens)
	}
	if s.Temperature < 0 || math.IsNaN(s.Temperature) || math.IsInf(s.Temperature, 0) {
		return fmt.Errorf("temperature = %g, want a finite value >= 0", s.Temperature)
	}
	if s.TopK < 0 {
		return fmt.Errorf("top-k = %d, want >= 0 (0 for no limit)", s.TopK)
	}
	if !(s.TopP >= 0 && s.TopP <= 1) {
		return fmt.Errorf("top-p = %g, want a value in [0, 1] (0 or 1 for no limit)", s.TopP)
	}
	return nil
}

// Options control how tokens are sampled and when generation ends: the
// sampling settings (Validate is theirs) and what only a generation of
// token ids needs beside them.
type Options struct {
	Sampling
	// Recompute feeds the whole context for every token instead of only the
	// new one through the model's key/value cache: slower, the same tokens.
	// The one-sequence decoder alone reads it; the engine always caches.
	Recompute bool
	// StopTokens end generation when sampled; the stop token is not part
	// of the completion. Model.Generate adds the model's end tokens.
	StopTokens []int32
	// Timing, when not nil, receives what the one-sequence decoder
	// (Tokens, Model.Generate, Session) measured: the prompt's and the
	// generation's rates, which sample prints.
	Timing *Timing
}

// Timing is how long a generation took: reading the prompt (until the
// first token was sampled) and generating the rest.
type Timing struct {
	PromptTokens, Generated int
	Prompt, Generation      time.Duration
}

// PromptRate is the prompt tokens read per second.
func (t Timing) PromptRate() float64 { return float64(t.PromptTokens) / t.Prompt.Seconds() }

// GenerationRate is the tokens generated per second after the first.
func (t Timing) GenerationRate() float64 {
	return float64(max(t.Generated-1, 0)) / t.Generation.Seconds()
}

// FinishReason says why generation ended, in the words of OpenAI's API.
type FinishReason string

// Finish reasons.
const (
	// FinishStop: a stop token or stop string was generated, or an Emit
	// function returned ErrStop.
	FinishStop FinishReason = "stop"
	// FinishLength: MaxTokens tokens were generated.
	FinishLength FinishReason = "length"
)

// Emit receives each generated token as it is made. Returning ErrStop
// ends generation with FinishStop; any other error ends it with that
// error.
type Emit func(id int32) error

// ErrStop is what an Emit function returns to end generation normally,
// as when the text so far ends with a stop string.
var ErrStop = errors.New("generate: stop")

// Tokens extends prompt by up to opts.MaxTokens sampled tokens and returns
// them (the completion, without a stop token) and why it ended. While the
// text fits the model's context, the model sees each token once and keeps
// its keys and values in a cache (model.KVCache); beyond it, each new
// token is predicted from the last context's worth of tokens, recomputed.
// emit, when not nil, receives each token as it is made; ctx cancels
// between tokens.
func Tokens(ctx context.Context, m *model.Transformer, params []*mlx.Array, prompt []int32, opts Options, emit Emit) ([]int32, FinishReason, error) {
	var out []int32
	var reason FinishReason
	err := mlx.Do(func() error {
		d := newDecoder(m, params)
		defer d.free()
		var err error
		out, reason, err = d.run(ctx, prompt, opts, emit)
		return err
	})
	return out, reason, err
}

// decoder is generation's state on the MLX thread: the model and the
// key/value cache of the tokens it has read, which a Session keeps from
// one turn to the next.
type decoder struct {
	m      *model.Transformer
	params []*mlx.Array
	cache  *model.KVCache
	seen   []int32 // the tokens the cache holds, cache.Offset of them
	fed    int     // tokens fed through the model, for tests of the cache
	// stopToken is the stop token that ended the last run, -1 for none.
	stopToken int32
}

// newDecoder returns a decoder with an empty cache. Call on the MLX thread.
func newDecoder(m *model.Transformer, params []*mlx.Array) *decoder {
	return &decoder{m: m, params: params, cache: m.NewKVCache()}
}

// free releases the cache. Call on the MLX thread.
func (d *decoder) free() {
	d.cache.Free()
	d.seen = nil
}

// reuse keeps the part of the cache that prompt starts with: the longest
// common prefix of what the cache holds and prompt, less the prompt's
// last token (its logits are needed).
func (d *decoder) reuse(prompt []int32) error {
	n := 0
	for n < len(d.seen) && n < len(prompt)-1 && d.seen[n] == prompt[n] {
		n++
	}
	d.seen = d.seen[:n]
	if err := d.cache.Truncate(n); err != nil {
		// A rolling cache (a sliding-window layer) no longer holds the
		// window position n needs: read the whole prompt again.
		d.cache.Free()
		d.seen = nil
	}
	return nil
}

// run is Tokens on the MLX thread, continuing from what d's cache holds.
// Afterwards the cache holds the prompt and the completion but its last
// token; after an error it is empty.
func (d *decoder) run(ctx context.Context, prompt []int32, opts Options, emit Emit) (_ []int32, _ FinishReason, err error) {
	if err := opts.Validate(); err != nil {
		return nil, "", err
	}
	if len(prompt) == 0 {
		return nil, "", fmt.Errorf("generate: empty prompt; give at least one token")
	}
	if ctx == nil {
		ctx = context.Background()
	}
	d.stopToken = -1
	m, cfg := d.m, d.m.Config
	start := time.Now()
	if t := opts.Timing; t != nil {
		*t = Timing{PromptTokens: len(prompt)}
		defer func() {
			if t.Prompt == 0 {
				t.Prompt = time.Since(start)
			} else {
				t.Generation = time.Since(start) - t.Prompt
			}
		}()
	}
	key := mlx.RandomKey(opts.Seed)
	defer func() { key.Free() }()
	out := append([]int32(nil), prompt...)
	defer func() {
		if err != nil {
			d.free()
			return
		}
		d.seen = slices.Clone(out[:d.cache.Offset])
	}()
	var reuseErr error
	mlx.Run(func() []*mlx.Array {
		reuseErr = d.reuse(out)
		return d.cache.Arrays()
	})
	if reuseErr != nil {
		return nil, "", fmt.Errorf("generate: %w", reuseErr)
	}
	for i := 0; i < opts.MaxTokens; i++ {
		if err := ctx.Err(); err != nil {
			return out[len(prompt):], "", err
		}
		var next int32
		var stepErr error
		mlx.Run(func() []*mlx.Array {
			keys := mlx.RandomSplit(key, 2)
			var logits *mlx.Array
			if opts.Recompute || len(out) > cfg.Context {
				d.cache.Free()
				window := out[max(0, len(out)-cfg.Context):]
				d.fed += len(window)
				logits = m.Logits(d.params, mlx.FromSlice(window, 1, len(window)))
			} else {
				fresh := out[d.cache.Offset:] // the tokens the cache has not seen
				d.fed += len(fresh)
				logits = m.LogitsCached(d.params, mlx.FromSlice(fresh, 1, len(fresh)), d.cache)
			}
			n := logits.Dim(1)
			last := mlx.AsType(mlx.Reshape(mlx.Slice(logits, []int{0, n - 1, 0},
				[]int{1, n, cfg.VocabSize}), cfg.VocabSize), mlx.Float32)
			var tok *mlx.Array
			if opts.Temperature == 0 {
				tok = mlx.ArgmaxAll(last)
			} else {
				last = mlx.MulScalar(last, 1/opts.Temperature)
				if opts.TopK > 0 && opts.TopK < cfg.VocabSize {
					kth := mlx.Min(mlx.TopK(last, opts.TopK, -1))
					last = mlx.Where(mlx.Less(last, kth), mlx.Scalar(math.Inf(-1), mlx.Float32), last)
				}
				if opts.TopP > 0 && opts.TopP < 1 {
					if last, stepErr = nucleus(last, opts.TopP); stepErr != nil {
						return nil
					}
				}
				tok = mlx.RandomCategorical(last, -1, keys[1])
			}
			v, e := tok.Int32s()
			if e != nil {
				stepErr = e
				return nil
			}
			next = v[0]
			key.Free()
			key = keys[0]
			return append([]*mlx.Array{key}, d.cache.Arrays()...)
		})
		if stepErr != nil {
			return nil, "", fmt.Errorf("generate: %w", stepErr)
		}
		if t := opts.Timing; t != nil {
			if i == 0 {
				t.Prompt = time.Since(start)
			}
			t.Generated++
		}
		if slices.Contains(opts.StopTokens, next) {
			d.stopToken = next
			return out[len(prompt):], FinishStop, nil
		}
		out = append(out, next)
		if emit != nil {
			if err := emit(next); errors.Is(err, ErrStop) {
				return out[len(prompt):], FinishStop, nil
			} else if err != nil {
				return out[len(prompt):], "", err
			}
		}
	}
	return out[len(prompt):], FinishLength, nil
}

// nucleus keeps the logits of the most likely tokens whose probabilities
// add up to at least p and sets the others to -Inf. The threshold is
// found on the host: the vocabulary's probabilities are one small copy.
func nucleus(logits *mlx.Array, p float64) (*mlx.Array, error) {
	probs := mlx.Softmax(logits, -1)
	host, err := probs.Float32s()
	if err != nil {
		return nil, err
	}
	sorted := append([]float32(nil), host...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i] > sorted[j] })
	sum, cut := 0.0, sorted[len(sorted)-1]
	for _, q := range sorted {
		sum += float64(q)
		if sum >= p {
			cut = q
			break
		}
	}
	return mlx.Where(mlx.Less(probs, mlx.Scalar(float64(cut), mlx.Float32)), mlx.Scalar(math.Inf(-1), mlx.Float32), logits), nil
}
