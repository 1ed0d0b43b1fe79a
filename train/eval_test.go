package train

import (
	"math"
	"strings"
	"testing"

	"github.com/posttrainllm/posttrainllm/data"
	"github.com/posttrainllm/posttrainllm/internal/runtest/fixture"
	"github.com/posttrainllm/posttrainllm/mlx"
	"github.com/posttrainllm/posttrainllm/model"
)

func closeTo(got, want, rel float64) bool { return math.Abs(got-want) <= rel*math.Abs(want) }

// TestEvaluateViewMatchesWindowByWindow cuts a view of 1,000 tokens into
// windows of 16 (999 targets: 62 full windows and one of 7) and evaluates
// it at batch sizes that leave different amounts of padding in the last
// batch, or none. Every result must equal the mean over the same windows
// evaluated one by one, unpadded: the padding is excluded from the sums and
// from the token count.
func TestEvaluateViewMatchesWindowByWindow(t *testing.T) {
	const T = 16
	m, params := fixture.EvalModel(t, T)
	tok, _ := data.NewTokenizer("byte")
	tokens := data.NewTokens(tok.Encode(fixture.SyntheticText(1_200)))
	view := tokens.View(100, 1100)

	var xs, ys [][]int32
	for s := 0; s < view.Len()-1; s += T {
		n := min(T, view.Len()-1-s)
		x, y := make([]int32, n), make([]int32, n)
		view.CopyInto(x, s)
		view.CopyInto(y, s+1)
		xs, ys = append(xs, x), append(ys, y)
	}
	if len(xs) != 63 || len(xs[62]) != 7 {
		t.Fatalf("test set-up: %d windows, the last of %d tokens; want 63 and 7", len(xs), len(xs[len(xs)-1]))
	}
	ce, sq, n := fixture.DirectSums(t, m, params, xs, ys)
	wantLoss, wantSq := ce/float64(n), sq/float64(n)

	// Padding counted as tokens would move the mean by far more than the
	// tolerance: 9 padded positions of the last window in 1,008.
	for _, batch := range []int{1, 4, 7, 9, 64} {
		res, err := EvaluateView(m, params, view, batch)
		if err != nil {
			t.Fatal(err)
		}
		if res.Tokens != 999 {
			t.Fatalf("batch %d: %d tokens evaluated, want 999 (every token after the first)", batch, res.Tokens)
		}
		if !closeTo(res.Loss, wantLoss, 1e-5) || !closeTo(res.LSESquared, wantSq, 1e-5) {
			t.Fatalf("batch %d: loss %.7f, mean logsumexp² %.5f; window by window %.7f, %.5f",
				batch, res.Loss, res.LSESquared, wantLoss, wantSq)
		}
		if p := res.Perplexity(); !closeTo(p, math.Exp(wantLoss), 1e-4) {
			t.Fatalf("batch %d: perplexity %.5f, want exp(loss) %.5f", batch, p, math.Exp(wantLoss))
		}
	}
}

// The padded positions must not count: a batch of windows whose padding
// holds tokens of high loss gives the mean of the real windows alone.
func TestEvalFuncMasksPaddingAndTracesOnce(t *testing.T) {
	const B, T = 3, 8
	m, params := fixture.EvalModel(t, T)
	traces := 0
	f, err := NewEvalFunc(func(p []*mlx.Array, x, y *mlx.Array) (*mlx.Array, *mlx.Array) {
		traces++
		return m.LossTerms(p, x, y)
	}, true)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Free()
	// Batch 0 is full; batch 1 keeps 5 positions of its first row and
	// nothing else, its other positions holding arbitrary tokens.
	rows := func(i int) ([]int32, []int32) {
		x, y := make([]int32, B*T), make([]int32, B*T)
		for j := range x {
			x[j], y[j] = int32((j*37+i*11)%256), int32((j*53+i*7+1)%256)
		}
		return x, y
	}
	res, err := f.Run(params, B, T, 2, func(i int, x, y []int32, mask []float32) int {
		rx, ry := rows(i)
		copy(x, rx)
		copy(y, ry)
		kept := 0
		for j := range mask {
			mask[j] = 0
			if i == 0 || j < 5 {
				mask[j], kept = 1, kept+1
			}
		}
		return kept
	})
	if err != nil {
		t.Fatal(err)
	}
	if traces != 1 {
		t.Fatalf("the evaluation traced %d times for two batches, want 1", traces)
	}
	var xs, ys [][]int32
	x0, y0 := rows(0)
	for r := range B {
		xs, ys = append(xs, x0[r*T:(r+1)*T]), append(ys, y0[r*T:(r+1)*T])
	}
	x1, y1 := rows(1)
	xs, ys = append(xs, x1[:5]), append(ys, y1[:5])
	ce, sq, n := fixture.DirectSums(t, m, params, xs, ys)
	if res.Tokens != n || !closeTo(res.Loss, ce/float64(n), 1e-5) || !closeTo(res.LSESquared, sq/float64(n), 1e-5) {
		t.Fatalf("masked evaluation: %d tokens, loss %.7f, lse² %.5f; the kept positions alone: %d, %.7f, %.5f",
			res.Tokens, res.Loss, res.LSESquared, n, ce/float64(n), sq/float64(n))
	}
}

func TestEvaluateViewRejectsTooLittle(t *testing.T) {
	m, params := fixture.EvalModel(t, 8)
	tokens := data.NewTokens([]int32{1, 2, 3})
	if _, err := EvaluateView(m, params, tokens.View(0, 1), 4); err == nil || !strings.Contains(err.Error(), "at least 2") {
		t.Fatalf("a one-token view: want an error asking for 2 tokens, got %v", err)
	}
	if _, err := EvaluateView(m, params, tokens.All(), 0); err == nil || !strings.Contains(err.Error(), "batch 0") {
		t.Fatalf("batch 0: want an error naming it, got %v", err)
	}
	// Two tokens are one prediction.
	res, err := EvaluateView(m, params, tokens.View(1, 3), 4)
	if err != nil || res.Tokens != 1 {
		t.Fatalf("a two-token view: %+v, %v; want one token evaluated", res, err)
	}
}

// A text shorter than the context is evaluated as one window of its own
// length, and a batch never holds more windows than the text has: the
// shape follows the text, and the loss is the text's, unpadded, as the
// model sees it position by position.
func TestEvaluateViewSizesItsWindowsToTheText(t *testing.T) {
	for _, c := range []struct{ context, targets, batch, T, b, windows int }{
		{8192, 1999, 8, 1999, 1, 1},
		{64, 999, 8, 64, 8, 16},
		{64, 130, 8, 64, 3, 3},
		{64, 64, 4, 64, 1, 1},
	} {
		T, b, w := EvalShape(c.context, c.targets, c.batch)
		if T != c.T || b != c.b || w != c.windows {
			t.Errorf("context %d, %d targets, batch %d: windows of %d, %d at a time, %d windows; want %d, %d, %d",
				c.context, c.targets, c.batch, T, b, w, c.T, c.b, c.windows)
		}
	}
	m, params := fixture.EvalModel(t, 512)
	tok, _ := data.NewTokenizer("byte")
	tokens := data.NewTokens(tok.Encode(fixture.SyntheticText(200)))
	view := tokens.View(0, 101)
	x, y := make([]int32, 100), make([]int32, 100)
	view.CopyInto(x, 0)
	view.CopyInto(y, 1)
	ce, sq, n := fixture.DirectSums(t, m, params, [][]int32{x}, [][]int32{y})
	res, err := EvaluateView(m, params, view, 16)
	if err != nil {
		t.Fatal(err)
	}
	if res.Tokens != 100 || !closeTo(res.Loss, ce/float64(n), 1e-5) || !closeTo(res.LSESquared, sq/float64(n), 1e-5) {
		t.Fatalf("100 targets at context 512: %d tokens, loss %.7f, mean logsumexp² %.5f; directly %d, %.7f, %.5f",
			res.Tokens, res.Loss, res.LSESquared, n, ce/float64(n), sq/float64(n))
	}
	if m.Memory != (model.Memory{}) {
		t.Errorf("the model's memory settings after evaluation: %+v, want them as they were", m.Memory)
	}
}
