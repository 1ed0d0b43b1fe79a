package step

import (
	"fmt"

	"github.com/posttrainllm/posttrainllm/data"
	"github.com/posttrainllm/posttrainllm/mlx"
)

// MaxStreamTokens is the longest view NewTokenStream holds on the device:
// 2^28 tokens, 1 GiB as int32. A longer corpus is trained on from windows
// copied on the host (Batch.X, Batch.Y), which costs no device memory.
const MaxStreamTokens = 1 << 28

// TokenStream is a view's tokens held on the default device, from which a
// step gathers each update's windows itself: a batch is then the windows'
// starts (Batch.Stream, Batch.Starts), N·B integers, instead of 2·N·B·T
// tokens made into arrays on the host every update.
//
// Why: on a CUDA GPU an MLX array made from host memory is managed memory,
// which the first kernel to read it migrates page by page, on the device's
// timeline; for the huge preset's 2 × 32 KiB of tokens that cost more than
// the gather itself (docs/performance/gpu.md, "Windows gathered on the
// device"). The stream is uploaded once and stays resident.
type TokenStream struct {
	tokens  *mlx.Array // [Len] int32
	shifted *mlx.Array // tokens[1:], a view: the targets' source
	offsets *mlx.Array // [context] int32: 0 … context-1
	n       int
	context int
}

// NewTokenStream copies view's tokens into an array on the default device
// for windows of context tokens. The view must hold more than context
// tokens and at most MaxStreamTokens.
func NewTokenStream(view data.View, context int) (*TokenStream, error) {
	n := view.Len()
	switch {
	case context < 1:
		return nil, fmt.Errorf("step: token stream with context %d, want at least 1", context)
	case n <= context:
		return nil, fmt.Errorf("step: token stream of %d tokens for context %d, want more than the context", n, context)
	case n > MaxStreamTokens:
		return nil, fmt.Errorf("step: token stream of %d tokens, want at most %d (MaxStreamTokens)", n, MaxStreamTokens)
	}
	host := make([]int32, n)
	view.CopyInto(host, 0)
	offsets := make([]int32, context)
	for i := range offsets {
		offsets[i] = int32(i)
	}
	ts := &TokenStream{n: n, context: context}
	err := mlx.Do(func() error {
		ts.tokens = mlx.FromSlice(host, n)
		ts.shifted = mlx.Slice(ts.tokens, []int{1}, []int{n})
		ts.offsets = mlx.FromSlice(offsets, context)
		if err := mlx.Eval(ts.tokens, ts.shifted, ts.offsets); err != nil {
			mlx.Free(ts.tokens, ts.shifted, ts.offsets)
			return fmt.Errorf("step: token stream of %d tokens: %w", n, err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return ts, nil
}

// Len returns the number of tokens in the stream.
func (t *TokenStream) Len() int { return t.n }

// Context returns the window length T the stream serves.
func (t *TokenStream) Context() int { return t.context }

// Tokens returns the stream's tokens on the device, [Len] int32. The
// stream owns them: they stay valid until Free.
func (t *TokenStream) Tokens() *mlx.Array { return t.tokens }

// Batch views a data batch of window starts (data.NewStartsBatch,
// data.NewStartsPrefetcher) over the view the stream was made from as a
// step's Batch; the starts are shared, not copied.
func (t *TokenStream) Batch(b *data.Batch) Batch {
	return Batch{Stream: t, Starts: b.Starts, N: b.N, B: b.B, T: b.T}
}

// arrays returns the step's window inputs for starts laid out [n, b]:
// the stream, its view one token further (the targets' source), the
// window offsets and the starts. Only the starts are new; the caller
// frees them.
func (t *TokenStream) arrays(starts []int32, n, b int) []*mlx.Array {
	return []*mlx.Array{t.tokens, t.shifted, t.offsets, mlx.FromSlice(starts, n, b)}
}

// Free releases the stream's arrays. A nil stream is a no-op.
func (t *TokenStream) Free() {
	if t == nil {
		return
	}
	mlx.Do(func() error {
		mlx.Free(t.tokens, t.shifted, t.offsets)
		return nil
	})
}
