package generate

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/posttrainllm/posttrainllm/mlx"
	"github.com/posttrainllm/posttrainllm/model"
)

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
func (d *decoder) reuse(prompt []int32) {
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
}

// run is Tokens on the MLX thread, continuing from what d's cache holds.
// Afterwards the cache holds the prompt and the completion but its last
// token; after an error it is empty.
//
// While the cache holds the context, each token's step is scheduled on
// the last step's token still on the device, before that token is read:
// the host builds one step while the device computes the other. A run
// that ends on a stop token has then fed it once more than needed; the
// cache drops it.
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
	s := &decodeRun{d: d, opts: opts, key: mlx.RandomKey(opts.Seed), out: append([]int32(nil), prompt...)}
	defer func() {
		s.release()
		if err != nil {
			d.free()
			return
		}
		if d.cache.Offset > len(s.out) {
			mlx.Run(func() []*mlx.Array {
				if d.cache.Truncate(len(s.out)) != nil {
					d.cache.Free() // read again next time
				}
				return d.cache.Arrays()
			})
		}
		d.seen = slices.Clone(s.out[:d.cache.Offset])
	}()
	mlx.Run(func() []*mlx.Array { d.reuse(s.out); return d.cache.Arrays() })
	completion := func() []int32 { return s.out[len(prompt):] }
	for i := 0; i < opts.MaxTokens; i++ {
		if err := ctx.Err(); err != nil {
			return completion(), "", err
		}
		if s.pending == nil {
			if err := s.schedule(nil); err != nil {
				return nil, "", err
			}
		}
		tok := s.pending
		s.pending = nil
		// The first token is read before the next step is scheduled: MLX
		// bounds the work queued, so scheduling a step can wait for much
		// of the one before it, which would delay the first token.
		if i > 0 && i+1 < opts.MaxTokens && s.cached(len(s.out)+1) {
			if err := s.schedule(tok); err != nil {
				tok.Free()
				return nil, "", err
			}
		}
		v, err := tok.Int32s()
		mlx.Free(tok)
		if err != nil {
			return nil, "", fmt.Errorf("generate: %w", err)
		}
		next := v[0]
		if t := opts.Timing; t != nil {
			if i == 0 {
				t.Prompt = time.Since(start)
			}
			t.Generated++
		}
		if slices.Contains(opts.StopTokens, next) {
			d.stopToken = next
			return completion(), FinishStop, nil
		}
		s.out = append(s.out, next)
		if emit != nil {
			if err := emit(next); errors.Is(err, ErrStop) {
				return completion(), FinishStop, nil
			} else if err != nil {
				return completion(), "", err
			}
		}
	}
	return completion(), FinishLength, nil
}

// decodeRun is one run's state: the tokens so far (prompt first), the
// random key of the next draw and the token of the step scheduled and not
// read yet.
type decodeRun struct {
	d       *decoder
	opts    Options
	key     *mlx.Array
	out     []int32
	pending *mlx.Array
}

// cached reports whether a step over a sequence of n tokens reads the
// cache (rather than recomputing the last context's worth of tokens).
func (s *decodeRun) cached(n int) bool {
	return !s.opts.Recompute && n <= s.d.m.Config.Context
}

// schedule builds the next step and starts evaluating it: it feeds the
// tokens the cache has not seen, from the host, or with fed not nil that
// token (a scalar on the device, the last step's, not yet in out, when
// the cache holds all of out), and leaves the sampled token in s.pending.
func (s *decodeRun) schedule(fed *mlx.Array) error {
	d, m, cfg := s.d, s.d.m, s.d.m.Config
	var stepErr error
	mlx.Run(func() []*mlx.Array {
		keys := mlx.RandomSplit(s.key, 2)
		var logits *mlx.Array
		switch {
		case fed != nil: // the cache holds every token of s.out
			d.fed++
			logits = m.LogitsCached(d.params, mlx.Reshape(fed, 1, 1), d.cache)
		case !s.cached(len(s.out)):
			d.cache.Free()
			window := s.out[max(0, len(s.out)-cfg.Context):]
			d.fed += len(window)
			logits = m.Logits(d.params, mlx.FromSlice(window, 1, len(window)))
		default:
			fresh := s.out[d.cache.Offset:]
			d.fed += len(fresh)
			logits = m.LogitsCached(d.params, mlx.FromSlice(fresh, 1, len(fresh)), d.cache)
		}
		n := logits.Dim(1)
		last := mlx.AsType(mlx.Reshape(mlx.Slice(logits, []int{0, n - 1, 0},
			[]int{1, n, cfg.VocabSize}), cfg.VocabSize), mlx.Float32)
		tok, err := s.sample(last, keys[1])
		if stepErr = err; err != nil {
			return nil
		}
		// Read as int32: a cast after the step would be evaluated behind
		// the step scheduled next, and reading the token would wait for it.
		tok = mlx.AsType(tok, mlx.Int32)
		if stepErr = mlx.AsyncEval(append([]*mlx.Array{tok}, d.cache.Arrays()...)...); stepErr != nil {
			return nil
		}
		s.key.Free()
		s.key, s.pending = keys[0], tok
		return append([]*mlx.Array{s.key, tok}, d.cache.Arrays()...)
	})
	if stepErr != nil {
		return fmt.Errorf("generate: %w", stepErr)
	}
	return nil
}

// sample draws the next token from the logits [V] (float32) with key:
// the most likely one at temperature 0.
func (s *decodeRun) sample(last, key *mlx.Array) (*mlx.Array, error) {
	opts, V := s.opts, s.d.m.Config.VocabSize
	if opts.Temperature == 0 {
		return mlx.ArgmaxAll(last), nil
	}
	last = mlx.MulScalar(last, 1/opts.Temperature)
	if opts.TopK > 0 && opts.TopK < V {
		kth := mlx.Min(mlx.TopK(last, opts.TopK, -1))
		last = mlx.Where(mlx.Less(last, kth), mlx.Scalar(math.Inf(-1), mlx.Float32), last)
	}
	if opts.TopP > 0 && opts.TopP < 1 {
		var err error
		if last, err = nucleus(last, opts.TopP); err != nil {
			return nil, err
		}
	}
	return mlx.RandomCategorical(last, -1, key), nil
}

// release frees the run's key and the token of a step still scheduled.
func (s *decodeRun) release() {
	mlx.Free(s.key)
	if s.pending != nil {
		mlx.Free(s.pending)
		s.pending = nil
	}
}
