package generate

import (
	"context"
	"errors"
	"fmt"
	"math"
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
