package train

import (
	"math"
	"strings"
	"testing"

	"github.com/posttrainllm/posttrainllm/step"
)

// stateSetup returns a fresh setup of the tiny config and a batch for it.
func stateSetup(t *testing.T) (*Setup, step.Batch) {
	t.Helper()
	s, _, cfg := preparedSetup(t, tinyConfig())
	n := cfg.Accum * cfg.Batch * cfg.Model.Context
	b := step.Batch{X: make([]int32, n), Y: make([]int32, n), N: cfg.Accum, B: cfg.Batch, T: cfg.Model.Context}
	for i := range b.X {
		b.X[i], b.Y[i] = int32(i%50), int32((i+1)%50)
	}
	return s, b
}

// A batch or learning rate the step cannot take is refused, naming the
// value and what was expected, and leaves the state as it was.
func TestStateRejectsBadUpdates(t *testing.T) {
	s, good := stateSetup(t)
	st := s.State
	if _, err := st.Stats(); err == nil || !strings.Contains(err.Error(), "before the first update") {
		t.Fatalf("Stats before any update: %v", err)
	}
	params := st.Params()
	short := good
	short.Y = good.Y[1:]
	wide := good
	wide.N = 2
	for _, c := range []struct {
		lr   float64
		b    step.Batch
		want string
	}{
		{math.NaN(), good, "lr = NaN, want a finite value >= 0"},
		{-1e-3, good, "lr = -0.001"},
		{math.Inf(1), good, "lr = +Inf"},
		{1e39, good, "float32: at most"},
		{1e-3, short, "holds 128 inputs and 127 targets, want N·B·T = 1·4·32 = 128 each"},
		{1e-3, wide, "batch of shape [2 4 32], want [accum=1"},
		{1e-3, step.Batch{}, "batch of shape [0 0 0]"},
	} {
		if _, err := st.Update(c.lr, c.b); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Update(%g, %d×%d×%d batch) = %v, want an error containing %q", c.lr, c.b.N, c.b.B, c.b.T, err, c.want)
		}
	}
	if got := st.Params(); &got[0] != &params[0] || !got[0].Valid() {
		t.Fatal("a refused update replaced or released the parameters")
	}
	if s.Step.Traces() != 0 {
		t.Fatalf("refused updates traced the step %d times", s.Step.Traces())
	}
	if _, err := step.NewState(s.Step, params[:2], st.OptState()); err == nil || !strings.Contains(err.Error(), "state of 2 params") {
		t.Fatalf("NewState with 2 of %d parameters: %v", len(params), err)
	}
}

// Update returns the loss Stats then reports with the gradient norm; Eval,
// GraphOps and Stats work before and after the values are read; a freed
// state refuses further use.
func TestStateUpdateStatsEval(t *testing.T) {
	s, b := stateSetup(t)
	st := s.State
	loss, err := st.Update(1e-3, b)
	if err != nil {
		t.Fatal(err)
	}
	stats, err := st.Stats()
	if err != nil || stats.Loss != loss || !(stats.GradNorm > 0) || math.Abs(loss-math.Log(256)) > 0.3 {
		t.Fatalf("Update loss %g; Stats %+v (%v); want the same loss, about ln 256, and a positive norm", loss, stats, err)
	}
	if err := st.Eval(); err != nil {
		t.Fatalf("Eval after Stats: %v", err)
	}
	if err := st.Apply(1e-3, b); err != nil {
		t.Fatal(err)
	}
	ops, err := st.GraphOps()
	if err != nil || len(ops) == 0 {
		t.Fatalf("GraphOps of an applied update: %v (%v), want its operations", ops, err)
	}
	if err := st.UpdateAsync(1e-3, b); err != nil {
		t.Fatal(err)
	}
	if again, err := st.Stats(); err != nil || again.Loss == stats.Loss || math.IsNaN(again.Loss) {
		t.Fatalf("Stats after two more updates: %+v (%v), want a new finite loss", again, err)
	}
	params := st.Params()
	st.Free()
	st.Free()
	if params[0].Valid() {
		t.Fatal("Free left the parameters live")
	}
	if _, err := st.Update(1e-3, b); err == nil || !strings.Contains(err.Error(), "freed state") {
		t.Fatalf("Update of a freed state: %v", err)
	}
	if err := st.Eval(); err == nil {
		t.Fatal("Eval of a freed state succeeded")
	}
	var nilState *step.State
	nilState.Free()
}

// UpdateAsync, which waits for the update before the one it schedules,
// computes what Update computes: the same losses and parameters after a
// chain of updates. A refused update leaves the last update's statistics
// to Stats.
func TestUpdateAsyncMatchesUpdate(t *testing.T) {
	sync, b := stateSetup(t)
	async, _ := stateSetup(t)
	const n = 4
	var want float64
	for i := range n {
		loss, err := sync.State.Update(1e-3*float64(i+1), b)
		if err != nil {
			t.Fatal(err)
		}
		want = loss
		if err := async.State.UpdateAsync(1e-3*float64(i+1), b); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := async.State.Update(-1, b); err == nil {
		t.Fatal("an update with lr -1 was taken")
	}
	if err := async.State.UpdateAsync(-1, b); err == nil {
		t.Fatal("an asynchronous update with lr -1 was taken")
	}
	got, err := async.State.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if got.Loss != want || !(got.GradNorm > 0) {
		t.Fatalf("after %d asynchronous updates Stats = %+v, synchronous loss %g", n, got, want)
	}
	for i, p := range sync.State.Params() {
		a, err := p.Float32s()
		if err != nil {
			t.Fatal(err)
		}
		c, err := async.State.Params()[i].Float32s()
		if err != nil {
			t.Fatal(err)
		}
		for j := range a {
			if a[j] != c[j] {
				t.Fatalf("parameter %d [%d]: %g synchronously, %g asynchronously", i, j, a[j], c[j])
			}
		}
	}
}
