package train

import (
	"errors"
	"fmt"
	"math"

	"github.com/posttrainllm/posttrainllm/data"
	"github.com/posttrainllm/posttrainllm/mlx"
	"github.com/posttrainllm/posttrainllm/model"
)

// TokenLossFunc gives the per-position loss terms of parameters and one
// batch of tokens x and targets y ([B, T] int32): the cross-entropy and
// the logsumexp of the logits, both [B, T] float32.
// (*model.Transformer).LossTerms is one.
type TokenLossFunc func(params []*mlx.Array, x, y *mlx.Array) (ce, lse *mlx.Array)

// EvalResult is a loss measured over a set of tokens.
type EvalResult struct {
	// Tokens is the number of predicted tokens the means are over.
	Tokens int `json:"tokens"`
	// Loss is the mean next-token cross-entropy, in nats per token.
	Loss float64 `json:"loss"`
	// LSESquared is the mean square of the logits' logsumexp: the z-loss
	// penalty before its coefficient. Training adds ZLoss × LSESquared to
	// the cross-entropy when the model's z_loss is above 0.
	LSESquared float64 `json:"lse_squared"`
}

// Perplexity is exp(Loss).
func (r EvalResult) Perplexity() float64 { return math.Exp(r.Loss) }

// EvalFunc sums the loss terms of a batch over the positions a mask keeps:
// (params…, x[B,T], y[B,T], mask[B,T] float32) → (Σ mask·ce, Σ mask·lse²).
// Sums rather than means, so batches that keep different numbers of
// positions (the padded last batch of a whole split) add up exactly. Shapes
// are fixed, so a compiled EvalFunc traces once.
type EvalFunc struct {
	terms TokenLossFunc
	fn    *mlx.Closure // nil: run the body uncompiled
}

// NewEvalFunc returns the EvalFunc of terms, compiled when compile says
// so. It must run on the MLX thread; Free releases it.
func NewEvalFunc(terms TokenLossFunc, compile bool) (*EvalFunc, error) {
	f := &EvalFunc{terms: terms}
	if compile {
		var err error
		if f.fn, err = mlx.Compile(f.body); err != nil {
			return nil, fmt.Errorf("eval: compiling: %w", err)
		}
	}
	return f, nil
}

// body is the function EvalFunc computes, compiled or not.
func (f *EvalFunc) body(in []*mlx.Array) ([]*mlx.Array, error) {
	n := len(in) - 3
	x, y, mask := in[n], in[n+1], in[n+2]
	ce, lse := f.terms(in[:n], x, y)
	// Padding positions hold token 0, so their terms are finite and the
	// mask's zeros remove them.
	return []*mlx.Array{
		mlx.Sum(mlx.Multiply(ce, mask)),
		mlx.Sum(mlx.Multiply(mlx.Square(lse), mask)),
	}, nil
}

// Free releases the compiled function.
func (f *EvalFunc) Free() { f.fn.Free() }

// BatchFill writes batch i into x, y and mask ([B·T] each, row-major) and
// returns how many positions it keeps (mask 1).
type BatchFill func(i int, x, y []int32, mask []float32) int

// Run evaluates batches batches of [batch, context] positions that fill
// writes and returns the means over the kept positions. The next batch is
// prepared and scheduled while the device works on the one before; at most
// two are in flight. It must run on the MLX thread.
func (f *EvalFunc) Run(params []*mlx.Array, batch, context, batches int, fill BatchFill) (EvalResult, error) {
	type pending struct{ ce, sq *mlx.Array }
	var (
		res       EvalResult
		sumCE, sq float64
		inFlight  []pending
	)
	defer func() {
		for _, p := range inFlight {
			mlx.Free(p.ce, p.sq)
		}
	}()
	collect := func() error {
		p := inFlight[0]
		inFlight = inFlight[1:]
		defer mlx.Free(p.ce, p.sq)
		c, err := p.ce.Item()
		if err != nil {
			return err
		}
		s, err := p.sq.Item()
		if err != nil {
			return err
		}
		sumCE += c
		sq += s
		return nil
	}
	xs := make([]int32, batch*context)
	ys := make([]int32, batch*context)
	mask := make([]float32, batch*context)
	for i := range batches {
		res.Tokens += fill(i, xs, ys, mask)
		x := mlx.FromSlice(xs, batch, context)
		y := mlx.FromSlice(ys, batch, context)
		m := mlx.FromSlice(mask, batch, context)
		in := append(append(make([]*mlx.Array, 0, len(params)+3), params...), x, y, m)
		var out []*mlx.Array
		var err error
		if f.fn != nil {
			out, err = f.fn.Call(in...)
		} else {
			out, err = f.body(in)
		}
		mlx.Free(x, y, m)
		if err == nil {
			err = mlx.AsyncEval(out...)
		}
		if err != nil {
			mlx.Free(out...)
			return res, fmt.Errorf("eval: %w", err)
		}
		inFlight = append(inFlight, pending{out[0], out[1]})
		if len(inFlight) == 2 {
			if err := collect(); err != nil {
				return res, fmt.Errorf("eval: %w", err)
			}
		}
	}
	for len(inFlight) > 0 {
		if err := collect(); err != nil {
			return res, fmt.Errorf("eval: %w", err)
		}
	}
	if res.Tokens == 0 {
		return res, errors.New("eval: no tokens to evaluate")
	}
	res.Loss = sumCE / float64(res.Tokens)
	res.LSESquared = sq / float64(res.Tokens)
	return res, nil
}

// EvaluateView measures the loss of params on every token of view once:
// the view is cut into consecutive, non-overlapping windows of the model's
// context (inputs view[s:s+T], targets view[s+1:s+T+1]), so each token
// after the first is predicted exactly once, with the windows' own tokens
// before it as context. Windows go batch at a time through one compiled
// function; the last window, and the last batch, are padded to full shape
// and the padding is masked out of the means. The view needs at least two
// tokens. It runs on the MLX thread, on the caller's default device.
//
// The shape is sized to the text (EvalShape): a text shorter than the
// context is one window of its own length, not a window of the context
// padded, and a batch holds no more windows than the text has. Causal
// attention makes the values the same as with the padding: a position sees
// only the tokens before it. The loss's logits are computed in chunks of
// positions where a batch's float32 logits would exceed 1 GiB
// (Config.ModelMemory's automatic rule); m.Memory is put back after.
func EvaluateView(m *model.Transformer, params []*mlx.Array, view data.View, batch int) (EvalResult, error) {
	if batch < 1 {
		return EvalResult{}, fmt.Errorf("eval: batch %d, want >= 1", batch)
	}
	targets := view.Len() - 1 // tokens with a token before them
	if targets < 1 {
		return EvalResult{}, fmt.Errorf("eval: %d tokens, want at least 2 (a token and the one it predicts)", view.Len())
	}
	if err := mlx.Eval(params...); err != nil {
		return EvalResult{}, fmt.Errorf("eval: %w", err)
	}
	T, batch, windows := EvalShape(m.Config.Context, targets, batch)
	batches := (windows-1)/batch + 1
	mem := m.Memory
	defer func() { m.Memory = mem }()
	if m.Memory.LossChunk == 0 {
		m.Memory.LossChunk = lossChunkFor(batch*T, m.Config.PaddedVocab())
	}
	fill := func(i int, x, y []int32, mask []float32) int {
		kept := 0
		for r := range batch {
			row := r * T
			n := 0 // positions of this window
			if w := i*batch + r; w < windows {
				start := w * T
				n = min(T, targets-start)
				view.CopyInto(x[row:row+n], start)
				view.CopyInto(y[row:row+n], start+1)
			}
			for j := row; j < row+n; j++ {
				mask[j] = 1
			}
			for j := row + n; j < row+T; j++ {
				x[j], y[j], mask[j] = 0, 0, 0
			}
			kept += n
		}
		return kept
	}
	var res EvalResult
	err := mlx.Do(func() error {
		f, err := NewEvalFunc(m.LossTerms, true)
		if err != nil {
			return err
		}
		defer f.Free()
		sc := mlx.NewScope()
		defer sc.Close()
		res, err = f.Run(params, batch, T, batches, fill)
		return err
	})
	return res, err
}

// EvalShape is the shape EvaluateView evaluates targets targets in, for a
// model of context tokens and at most batch windows at a time: windows of
// T tokens (the context, or the whole text when it is shorter), batch
// windows at a time (no more than there are) and the number of windows.
func EvalShape(context, targets, batch int) (T, b, windows int) {
	T = min(context, targets)
	windows = (targets-1)/T + 1
	return T, min(batch, windows), windows
}

// EvaluateRows is the loss of params, with fn (NewEvalFunc), over the counted targets of the
// first rows of rows, as many as cover tokens positions (all of them when
// fewer), in batches of batch rows (the last padded with rows that count
// nothing). The same rows every time, so successive values compare.
func EvaluateRows(fn *EvalFunc, params []*mlx.Array, rows *data.Rows, batch, tokens int) (EvalResult, error) {
	T := rows.T
	n := min(rows.Len(), max(1, (tokens+T-1)/T))
	batches := (n + batch - 1) / batch
	sc := mlx.NewScope()
	defer sc.Close()
	return fn.Run(params, batch, T, batches, func(i int, x, y []int32, w []float32) int {
		clear(x)
		clear(y)
		clear(w)
		lo := i * batch * T
		hi := min(lo+batch*T, n*T)
		copy(x, rows.X[lo:hi])
		copy(y, rows.Y[lo:hi])
		copy(w, rows.W[lo:hi])
		n := 0
		for _, v := range w {
			if v > 0 {
				n++
			}
		}
		return n
	})
}
