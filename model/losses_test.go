package model

import (
	"maps"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/posttrainllm/posttrainllm/mlx"
)

// TestTokenLossesMatchLogSoftmaxOfLogits computes, in float64 on the host,
// −log softmax(logits)[target] and logsumexp(logits) of every position from
// Logits, and compares LossTerms with them: the per-token terms are the
// cross-entropy of the model's own logits, position by position, on a
// vocabulary padded with −∞ rows.
func TestTokenLossesMatchLogSoftmaxOfLogits(t *testing.T) {
	c := smallConfig()
	c.PadVocabTo = 32 // 61 → 64 rows: the padding must not count
	m, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	params, err := m.Init(11)
	if err != nil {
		t.Fatal(err)
	}
	const B, T = 2, 7
	x, y := tokens(t, B, T, c.VocabSize, 2), tokens(t, B, T, c.VocabSize, 9)
	targets, err := y.Int32s()
	if err != nil {
		t.Fatal(err)
	}
	logits := values(t, m.Logits(params, x)) // [B, T, PaddedVocab]
	pv := c.PaddedVocab()
	wantCE := make([]float64, B*T)
	wantLSE := make([]float64, B*T)
	for p := range B * T {
		row := logits[p*pv : (p+1)*pv]
		hi := math.Inf(-1)
		for _, v := range row {
			hi = math.Max(hi, v)
		}
		z := 0.0
		for _, v := range row {
			z += math.Exp(v - hi)
		}
		wantLSE[p] = hi + math.Log(z)
		wantCE[p] = wantLSE[p] - row[targets[p]]
	}

	ce, lse := m.LossTerms(params, x, y)
	for _, a := range []*mlx.Array{ce, lse} {
		if !slices.Equal(a.Shape(), []int{B, T}) || a.Dtype() != mlx.Float32 {
			t.Fatalf("LossTerms gave %v %v, want [%d %d] float32", a.Shape(), a.Dtype(), B, T)
		}
	}
	check := func(name string, got, want []float64) {
		t.Helper()
		for p := range want {
			if d := math.Abs(got[p] - want[p]); d > 1e-5*math.Max(1, math.Abs(want[p])) {
				t.Fatalf("%s at position %d (batch %d, t %d) = %.7f, from the logits %.7f", name, p, p/T, p%T, got[p], want[p])
			}
		}
	}
	check("cross-entropy", values(t, ce), wantCE)
	check("logsumexp", values(t, lse), wantLSE)
	check("TokenLosses", values(t, m.TokenLosses(params, x, y)), wantCE)
}

// TestLossIsMeanTokenLossPlusZPenalty: with z-loss on, Loss is the mean of
// TokenLosses plus ZLoss times the mean square of the logsumexp, and the
// penalty is large enough here that leaving it out would show.
func TestLossIsMeanTokenLossPlusZPenalty(t *testing.T) {
	c := smallConfig()
	c.ZLoss = 1e-2
	m, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	params, err := m.Init(4)
	if err != nil {
		t.Fatal(err)
	}
	x, y := tokens(t, 3, 9, c.VocabSize, 1), tokens(t, 3, 9, c.VocabSize, 6)
	ce, lse := m.LossTerms(params, x, y)
	var meanCE, meanSq float64
	for _, v := range values(t, ce) {
		meanCE += v / 27
	}
	for _, v := range values(t, lse) {
		meanSq += v * v / 27
	}
	penalty := c.ZLoss * meanSq
	if penalty < 1e-3 {
		t.Fatalf("z penalty %.2g is too small for the test to tell it from rounding", penalty)
	}
	// The fused kernel serves only losses without z-loss: a formulation
	// that asks for it still gets the penalty.
	want := meanCE + penalty
	if got, err := m.Loss(params, x, y).Item(); err != nil || math.Abs(got-want) > 1e-5*want {
		t.Fatalf("Loss %.7f (%v), mean TokenLosses %.7f + z·mean(lse²) %.7f = %.7f", got, err, meanCE, penalty, want)
	}
	if got, err := m.loss(params, x, y, formulation{fusedLoss: true}).Item(); err != nil || math.Abs(got-want) > 1e-5*want {
		t.Fatalf("loss with the fused formulation %.7f (%v), want %.7f", got, err, want)
	}
}

func TestLossTermsCheckShapes(t *testing.T) {
	m, _ := New(smallConfig())
	params, _ := m.Init(1)
	ce, lse := m.LossTerms(params, tokens(t, 2, 4, 61, 0), tokens(t, 4, 2, 61, 1))
	for _, a := range []*mlx.Array{ce, lse} {
		if err := a.Err(); err == nil || !strings.Contains(err.Error(), "[4 2]") {
			t.Fatalf("targets [4 2] for tokens [2 4]: want an error naming the shapes, got %v", err)
		}
	}
	ce, lse = m.LossTerms(params, mlx.FromSlice([]int32{1, 2, 3}, 3), mlx.FromSlice([]int32{2, 3, 4}, 3))
	for _, a := range []*mlx.Array{ce, lse} {
		if err := a.Err(); err == nil || !strings.Contains(err.Error(), "[batch, time]") {
			t.Fatalf("1-D tokens: want an error naming [batch, time], got %v", err)
		}
	}
}

// KeepFusedLoss leaves a formulation with the fused cross-entropy on it
// when LossChunk is set: the same graph as without a chunk, where the
// chunk alone replaces it with the chunked loss (same value either way).
func TestKeepFusedLossIgnoresTheChunkOnTheFusedPath(t *testing.T) {
	m, _ := New(smallConfig())
	params, _ := m.Init(1)
	x, y := tokens(t, 3, 9, 61, 1), tokens(t, 3, 9, 61, 6)
	graph := func(mem Memory) (map[string]int, float64) {
		m.Memory = mem
		loss := m.loss(params, x, y, formulation{fusedLoss: true})
		ops, err := mlx.GraphOps(loss)
		if err != nil {
			t.Fatal(err)
		}
		v, err := loss.Item()
		if err != nil {
			t.Fatal(err)
		}
		return ops, v
	}
	whole, want := graph(Memory{})
	kept, got := graph(Memory{LossChunk: 4, KeepFusedLoss: true})
	chunked, chunkedLoss := graph(Memory{LossChunk: 4})
	if !maps.Equal(kept, whole) {
		t.Errorf("chunk 4 with the fused loss kept: graph %v, want the fused loss's %v", kept, whole)
	}
	if maps.Equal(chunked, whole) {
		t.Errorf("chunk 4: the fused loss's graph %v, want the chunked loss", chunked)
	}
	if math.Abs(got-want) > 1e-6*want || math.Abs(chunkedLoss-want) > 1e-5*want {
		t.Errorf("losses %.7f (kept) and %.7f (chunked), want %.7f", got, chunkedLoss, want)
	}
}
