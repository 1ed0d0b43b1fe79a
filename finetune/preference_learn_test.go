package finetune

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/posttrainllm/posttrainllm/data"
	"github.com/posttrainllm/posttrainllm/generate"
	"github.com/posttrainllm/posttrainllm/internal/mlxtest"
	"github.com/posttrainllm/posttrainllm/internal/runtest"
	"github.com/posttrainllm/posttrainllm/mlx"
	"github.com/posttrainllm/posttrainllm/model"
	"github.com/posttrainllm/posttrainllm/optim"
	"github.com/posttrainllm/posttrainllm/peft"
	"github.com/posttrainllm/posttrainllm/step"
	"github.com/posttrainllm/posttrainllm/train"
)

// rulePairs are n preference records whose answers repeat the prompt's
// letters and end with a word: " ok" for the chosen answer, " no"
// for the rejected one. The rule (end with " ok") is the only difference.
func rulePairs(r *rand.Rand, n int) []data.PreferenceRecord {
	out := make([]data.PreferenceRecord, n)
	for i := range out {
		b := make([]byte, 3)
		for j := range b {
			b[j] = byte('a' + r.IntN(8))
		}
		prompt := string(b) + "="
		body := string(b)
		out[i] = data.PreferenceRecord{
			Chosen:   data.Record{Kind: data.CompletionRecord, Prompt: prompt, Completion: body + " ok"},
			Rejected: data.Record{Kind: data.CompletionRecord, Prompt: prompt, Completion: body + " no"},
		}
	}
	return out
}

// renderPairs renders records with the byte tokenizer into pair rows.
func renderPairs(t testing.TB, tok data.Tokenizer, recs []data.PreferenceRecord, T int) *data.Rows {
	t.Helper()
	pairs := make([]data.PairExample, len(recs))
	for i, r := range recs {
		pairs[i] = data.PairExample{Chosen: data.Render(r.Chosen, tok, true), Rejected: data.Render(r.Rejected, tok, true)}
	}
	rows, err := data.BuildPairRows(pairs, T, tok.EOT())
	if err != nil {
		t.Fatal(err)
	}
	return rows
}

// pretrainAgainst trains m from scratch with the supervised loss on one
// answer of each pair: the chosen one for every fourth pair, the rejected
// one for the others, so the model completes a prompt with its letters
// and mostly " no": a pretrained starting point that breaks the rule.
func pretrainAgainst(t testing.TB, m *model.Transformer, pairs *data.Rows, steps int) []*mlx.Array {
	t.Helper()
	T := pairs.T
	rows := &data.Rows{T: T}
	for i := 0; i < pairs.Len()/2; i++ {
		r := 2*i + 1
		if i%4 == 0 {
			r = 2 * i
		}
		rows.X, rows.Y, rows.W = append(rows.X, pairs.X[r*T:(r+1)*T]...), append(rows.Y, pairs.Y[r*T:(r+1)*T]...), append(rows.W, pairs.W[r*T:(r+1)*T]...)
	}
	cfg := runtest.TinyConfig()
	opt, err := train.NewOptimizer(cfg, m.Specs)
	if err != nil {
		t.Fatal(err)
	}
	state, _ := opt.Init()
	s, err := step.NewStep(fullLoss(m), opt, step.Layout{Trainable: len(m.Specs), Frozen: 0, State: len(state), Inputs: step.WeightedInputs}, step.StepOptions{Accum: 1, GradClip: 1, Compile: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Free()
	params, _ := m.Init(3)
	st, err := step.NewState(s, params, state)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Free()
	sampler, _ := data.NewRowSampler(rows, 1)
	b, _ := data.NewWeightedBatch(1, 16, rows.T)
	for i := 0; i < steps; i++ {
		if err := sampler.FillBatch(b); err != nil {
			t.Fatal(err)
		}
		if err := st.UpdateAsync(1e-2, step.Batch{X: b.X, Y: b.Y, W: b.W, N: 1, B: 16, T: rows.T}); err != nil {
			t.Fatal(err)
		}
	}
	out := make([]*mlx.Array, len(st.Params()))
	for i, p := range st.Params() {
		out[i] = mlx.Copy(p)
	}
	if err := mlx.Eval(out...); err != nil {
		t.Fatal(err)
	}
	return out
}

// greedyEnding generates greedily after each prompt with params and
// returns the share of completions that end their line with " ok".
func greedyEnding(t testing.TB, m *model.Transformer, params []*mlx.Array, tok data.Tokenizer, recs []data.PreferenceRecord) (float64, []string) {
	t.Helper()
	ok := 0
	var samples []string
	for _, r := range recs {
		prompt := tok.Encode(r.Chosen.Prompt)
		gen, _, err := generate.Tokens(context.Background(), m, params, prompt, generate.Options{Sampling: generate.Sampling{MaxTokens: 7}}, nil)
		out := append(slices.Clone(prompt), gen...)
		if err != nil {
			t.Fatal(err)
		}
		for i, id := range out {
			if id == tok.EOT() {
				out = out[:i]
				break
			}
		}
		text := tok.Decode(out)
		samples = append(samples, text)
		if strings.HasSuffix(text, " ok") {
			ok++
		}
	}
	return float64(ok) / float64(len(recs)), samples
}

// DPO with a LoRA adapter teaches a pretrained tiny model a rule its
// pretraining data mostly broke: held-out preference accuracy goes from
// ½ (every pair tied at the fresh adapter) to at least 90%, the model's
// own preference for the chosen answers (πc > πr) from at most half to at
// least 90%, and greedy completions of held-out prompts, which mostly
// ended with " no", follow the rule.
func TestDPOLearnsRule(t *testing.T) {
	tok, err := data.NewTokenizer("byte")
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(7, 8))
	trainRecs, validRecs := rulePairs(r, 256), rulePairs(r, 64)
	mlxtest.Run(t, func(t testing.TB) {
		m, err := model.New(runtest.TinyConfig().Model)
		if err != nil {
			t.Fatal(err)
		}
		trainRows, validRows := renderPairs(t, tok, trainRecs, 16), renderPairs(t, tok, validRecs, 16)
		base := pretrainAgainst(t, m, trainRows, 600)
		before, _ := greedyEnding(t, m, base, tok, validRecs[:16])

		a, err := peft.New(peft.Config{Method: peft.LoRA, Rank: 4, Alpha: 8, Targets: []string{"attn", "mlp"}}, m.Specs)
		if err != nil {
			t.Fatal(err)
		}
		p := Preference{Objective: DPO, Beta: 0.1}
		const steps, lr = 40, 3e-3
		loss := AdapterPreferenceLoss(m, a, p)
		opt, _ := optim.New("adamw", AdapterOptimizerParams(a), optim.DefaultConfig())
		ad, _ := a.Init(5, base)
		optState, _ := opt.Init()
		s, err := step.NewStep(loss, opt, step.Layout{Trainable: len(ad), Frozen: len(base), State: len(optState), Inputs: step.RowInputs, RowInputs: 0, Aux: PreferenceAux}, step.StepOptions{Accum: 2, GradClip: 1, Compile: true})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Free()
		st, err := step.NewFrozenState(s, ad, base, optState)
		if err != nil {
			t.Fatal(err)
		}
		defer st.Free()
		eval, err := NewPairEvaluator(loss, len(ad), len(base), true)
		if err != nil {
			t.Fatal(err)
		}
		defer eval.Free()
		start, err := eval.Run(st.Params(), st.Frozen(), validRows, nil, 32)
		if err != nil {
			t.Fatal(err)
		}
		// The model's own preference: SimPO's rewards without the length
		// normalisation, πc > πr, at β 1 and γ 0 on the base alone.
		own := func(params []*mlx.Array) float64 {
			e, err := NewPairEvaluator(PreferenceLoss(m, Preference{Objective: DPO, Beta: 1}), len(params), 0, false)
			if err != nil {
				t.Fatal(err)
			}
			defer e.Free()
			res, err := e.Run(params, nil, validRows, make([]float32, validRows.Len()), 32)
			if err != nil {
				t.Fatal(err)
			}
			return res.Accuracy
		}
		ownBefore := own(base)
		sampler, _ := data.NewRowSampler(trainRows, 2)
		b, _ := data.NewWeightedBatch(2, 8, trainRows.T)
		for i := 0; i < steps; i++ {
			if err := sampler.FillBatch(b); err != nil {
				t.Fatal(err)
			}
			rw := make([]float32, len(b.Index))
			for k, row := range b.Index {
				rw[k] = float32(1 - row%2)
			}
			if err := st.UpdateAsync(lr, step.Batch{X: b.X, Y: b.Y, W: b.W, RowW: rw, N: 2, B: 8, T: trainRows.T}); err != nil {
				t.Fatal(err)
			}
		}
		end, err := eval.Run(st.Params(), st.Frozen(), validRows, nil, 32)
		if err != nil {
			t.Fatal(err)
		}
		fused, err := a.Fuse(st.Frozen(), st.Params())
		if err != nil {
			t.Fatal(err)
		}
		defer mlx.Free(fused...)
		ownAfter := own(fused)
		after, samples := greedyEnding(t, m, fused, tok, validRecs[:16])
		t.Logf("held-out accuracy %.3f → %.3f (loss %.4f → %.4f, margin %.3f); own preference %.3f → %.3f; greedy ' ok' %.3f → %.3f; samples %q",
			start.Accuracy, end.Accuracy, start.Loss, end.Loss, end.Margin, ownBefore, ownAfter, before, after, samples[:4])
		if start.Accuracy != 0.5 {
			t.Errorf("held-out accuracy at the fresh adapter %g, want ½ (every pair tied)", start.Accuracy)
		}
		if ownBefore > 0.5 || before > 0.5 {
			t.Errorf("the pretrained model prefers the chosen answer in %.2f of the pairs and ends %.2f of its greedy completions with \" ok\"; want at most half (the test's premise)", ownBefore, before)
		}
		if end.Accuracy < 0.9 || ownAfter < 0.9 {
			t.Errorf("after %d DPO updates: held-out accuracy %.3f, own preference %.3f; want >= 0.9", steps, end.Accuracy, ownAfter)
		}
		if after < 0.9 {
			t.Errorf("after DPO %.2f of greedy completions end with \" ok\", want >= 0.9: %s", after, fmt.Sprint(samples))
		}
	})
}
