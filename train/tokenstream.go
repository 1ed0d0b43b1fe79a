package train

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
		return nil, fmt.Errorf("train: token stream with context %d, want at least 1", context)
	case n <= context:
		return nil, fmt.Errorf("train: token stream of %d tokens for context %d, want more than the context", n, context)
	case n > MaxStreamTokens:
		return nil, fmt.Errorf("train: token stream of %d tokens, want at most %d (MaxStreamTokens)", n, MaxStreamTokens)
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
			return fmt.Errorf("train: token stream of %d tokens: %w", n, err)
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

// WindowSource says how a run of cfg over a training view of n tokens
// feeds its windows to the step: gathered on the device from a
// TokenStream (device true) when Config.Windows asks for it, explicitly
// or by default on a GPU, unless something needs them on the host; why
// not when they are copied from the host. What needs the host:
// BPE-dropout, whose windows are re-encoded rather than slices of the
// corpus; GaLore's and Sophia's refreshes, which read an update's tokens;
// a corpus longer than MaxStreamTokens.
func WindowSource(cfg Config, n int) (device bool, why string) {
	switch {
	case cfg.Windows == "host":
		return false, "windows = host"
	case cfg.Windows != "device" && cfg.Device != "gpu":
		return false, "the default on the CPU"
	case cfg.BPEDropout > 0:
		return false, "BPE-dropout re-encodes each window"
	case cfg.Optimizer == "galore" || cfg.Optimizer == "sophia":
		return false, fmt.Sprintf("the %s refresh reads the batch's tokens", cfg.Optimizer)
	case n > MaxStreamTokens:
		return false, fmt.Sprintf("the corpus has %d tokens, more than the %d a token stream holds", n, MaxStreamTokens)
	}
	return true, ""
}

// DescribeWindows is WindowSource for a run's header: where its windows
// come from.
func DescribeWindows(cfg Config, n int) string {
	if device, why := WindowSource(cfg, n); !device {
		return "copied from the host (" + why + ")"
	}
	return fmt.Sprintf("gathered on the device from %d tokens held there", n)
}
