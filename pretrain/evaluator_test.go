package pretrain

import (
	"encoding/json"
	"math"
	"strings"
	"testing"

	"github.com/posttrainllm/posttrainllm/checkpoint"
	"github.com/posttrainllm/posttrainllm/data"
	"github.com/posttrainllm/posttrainllm/internal/runtest"
	"github.com/posttrainllm/posttrainllm/internal/runtest/fixture"
	"github.com/posttrainllm/posttrainllm/mlx"
	"github.com/posttrainllm/posttrainllm/model"
	"github.com/posttrainllm/posttrainllm/train"
)

func closeTo(got, want, rel float64) bool { return math.Abs(got-want) <= rel*math.Abs(want) }

// The evaluator draws ceil(tokens / (batch·context)) batches of the
// sampler's windows, the same ones every call: its result is the mean over
// those windows, computed window by window.
func TestEvaluatorCoversItsTokensWithFixedWindows(t *testing.T) {
	const B, T, seed = 3, 8, 7
	m, params := fixture.EvalModel(t, T)
	tok, _ := data.NewTokenizer("byte")
	view := data.NewTokens(tok.Encode(fixture.SyntheticText(3_000))).All()
	for _, compile := range []bool{true, false} {
		e, err := NewEvaluator(m.LossTerms, view, B, T, 50, seed, compile) // 50 tokens: 3 batches of 24
		if err != nil {
			t.Fatal(err)
		}
		defer e.Free()
		if e.Tokens() != 72 {
			t.Fatalf("an evaluation of at least 50 tokens in batches of %d×%d covers %d, want 72", B, T, e.Tokens())
		}
		first, err := e.Evaluate(params)
		if err != nil {
			t.Fatal(err)
		}
		again, err := e.Evaluate(params)
		if err != nil {
			t.Fatal(err)
		}
		if first != again {
			t.Fatalf("compile %v: two evaluations of the same parameters differ: %+v, %+v", compile, first, again)
		}
		s, err := data.NewSampler(view, T, seed)
		if err != nil {
			t.Fatal(err)
		}
		var xs, ys [][]int32
		for range 9 {
			x, y := make([]int32, T), make([]int32, T)
			s.Fill(x, y)
			xs, ys = append(xs, x), append(ys, y)
		}
		ce, sq, n := fixture.DirectSums(t, m, params, xs, ys)
		if first.Tokens != n || !closeTo(first.Loss, ce/float64(n), 1e-5) || !closeTo(first.LSESquared, sq/float64(n), 1e-5) {
			t.Fatalf("compile %v: %+v; the sampler's 9 windows one by one: %d tokens, loss %.7f, lse² %.5f",
				compile, first, n, ce/float64(n), sq/float64(n))
		}
	}
}

// A run with z-loss logs the held-out cross-entropy as val_loss and the
// z-loss term apart as val_z_loss, with the tokens covered; the values are
// those a fresh evaluator computes from the final checkpoint.
func TestRunLogsCrossEntropyAndZLossApart(t *testing.T) {
	cfg := runtest.TinyConfig()
	cfg.Model.ZLoss = 1e-2
	cfg.Steps, cfg.EvalEvery, cfg.EvalTokens = 10, 5, 300 // 3 batches of 4 × 32
	dir := t.TempDir()
	sum, ms := runTrainer(t, cfg, dir, "")
	var evals []train.Metrics
	for _, m := range ms {
		if m.ValLoss != nil {
			evals = append(evals, m)
		}
	}
	if len(evals) != 3 || evals[0].Step != 0 || evals[2].Step != 10 {
		t.Fatalf("%d evaluations logged, want them at steps 0, 5 and 10", len(evals))
	}
	for _, m := range evals {
		if m.ValZLoss == nil || !(*m.ValZLoss > 0) || m.ValTokens != 384 {
			t.Fatalf("step %d: val_z_loss %v, val_tokens %d; want a positive z-loss term and 384 tokens", m.Step, m.ValZLoss, m.ValTokens)
		}
	}
	last := evals[2]
	if sum.ValLoss != *last.ValLoss {
		t.Fatalf("summary held-out loss %v, the last logged val_loss %v", sum.ValLoss, *last.ValLoss)
	}

	ck, err := checkpoint.Latest(dir)
	if err != nil {
		t.Fatal(err)
	}
	loaded, err := train.LoadCheckpoint(ck)
	if err != nil {
		t.Fatal(err)
	}
	defer loaded.Free()
	m, err := model.New(loaded.State.Config.Model)
	if err != nil {
		t.Fatal(err)
	}
	params, err := loaded.OrderedParams(m)
	if err != nil {
		t.Fatal(err)
	}
	ds := memoryDataset(t, fixture.SyntheticText(60_000), cfg.Model.Context)
	e, err := NewEvaluator(m.LossTerms, ds.Val, cfg.Batch, cfg.Model.Context, cfg.EvalTokens, cfg.Seed+1, true)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Free()
	r, err := e.Evaluate(params)
	if err != nil {
		t.Fatal(err)
	}
	// The z-loss term is more than the tolerance, so a val_loss that
	// included it would fail.
	if !closeTo(*last.ValLoss, r.Loss, 1e-6) || !closeTo(*last.ValZLoss, cfg.Model.ZLoss*r.LSESquared, 1e-6) {
		t.Fatalf("logged val_loss %.7f, val_z_loss %.7f; the checkpoint evaluates to cross-entropy %.7f, z-loss term %.7f",
			*last.ValLoss, *last.ValZLoss, r.Loss, cfg.Model.ZLoss*r.LSESquared)
	}

	// Without z-loss the term is left out of the log.
	cfg.Model.ZLoss = 0
	_, ms = runTrainer(t, cfg, t.TempDir(), "")
	for _, m := range ms {
		if m.ValZLoss != nil {
			t.Fatalf("step %d: val_z_loss %v logged for a model without z-loss", m.Step, *m.ValZLoss)
		}
		if b, _ := json.Marshal(m); strings.Contains(string(b), "val_z_loss") {
			t.Fatalf("metrics line %s has val_z_loss", b)
		}
	}
}

// Evaluations free what they allocate: MLX's active memory is the same
// after 20 of them as after the first, for the sampled evaluator and for
// a whole view.
func TestEvaluationMemoryIsFlat(t *testing.T) {
	const T = 16
	m, params := fixture.EvalModel(t, T)
	tok, _ := data.NewTokenizer("byte")
	view := data.NewTokens(tok.Encode(fixture.SyntheticText(2_000))).All()
	e, err := NewEvaluator(m.LossTerms, view, 4, T, 200, 1, true)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Free()
	for name, eval := range map[string]func() error{
		"Evaluator": func() error { _, err := e.Evaluate(params); return err },
		"EvaluateView": func() error {
			_, err := train.EvaluateView(m, params, view, 4)
			return err
		},
	} {
		if err := eval(); err != nil {
			t.Fatal(err)
		}
		before := mlx.Memory().Active
		for range 20 {
			if err := eval(); err != nil {
				t.Fatal(err)
			}
		}
		if after := mlx.Memory().Active; after > before {
			t.Fatalf("%s: active memory %d B after 21 evaluations, %d B after the first", name, after, before)
		}
	}
}
