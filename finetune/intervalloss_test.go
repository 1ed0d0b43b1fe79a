package finetune

import (
	"math"
	"testing"

	"github.com/posttrainllm/posttrainllm/internal/mlxtest"
	"github.com/posttrainllm/posttrainllm/step"
)

// The interval loss is the mean of the updates' losses weighted by the
// targets each counted, not the plain mean of the updates: computed here
// from the losses Update returned, one by one. An update that counts
// nothing adds nothing, and a new interval starts after each call.
func TestIntervalLossIsTokenWeightedMean(t *testing.T) {
	m, xs, ys, ws := weightedFixture(t)
	mlxtest.Run(t, func(t testing.TB) {
		params, err := m.Init(1)
		if err != nil {
			t.Fatal(err)
		}
		upd, opt := zeroLRStep(t, m, 1)
		s, err := step.NewState(upd, params, opt)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Free()
		masks := [][]float32{ws, make([]float32, len(ws)), make([]float32, len(ws))}
		masks[2][5], masks[2][11] = 1, 1 // 2 targets, against 11 in ws
		var sum, tokens, plain float64
		for i, w := range masks {
			loss, err := s.Update(0.5, step.Batch{X: xs, Y: ys, W: w, N: 1, B: 4, T: 6})
			if err != nil {
				t.Fatal(err)
			}
			n := 0.0
			for _, v := range w {
				n += float64(v)
			}
			if i != 1 && loss == 0 {
				t.Fatalf("update %d: loss 0", i)
			}
			sum, tokens, plain = sum+loss*n, tokens+n, plain+loss/3
		}
		mean, got, updates, err := s.IntervalLoss()
		if err != nil {
			t.Fatal(err)
		}
		want := sum / tokens
		if updates != 3 || got != tokens || math.Abs(mean-want) > 1e-6*want {
			t.Fatalf("interval loss %.7g over %g tokens in %d updates, want %.7g over %g in 3", mean, got, updates, want, tokens)
		}
		if math.Abs(mean-plain) < 1e-4 {
			t.Fatalf("the weighted mean %.7g is the plain mean %.7g: the fixture does not tell them apart", mean, plain)
		}
		if _, _, _, err := s.IntervalLoss(); err == nil {
			t.Fatal("an interval with no update gave a loss")
		}
		loss, err := s.Update(0.5, step.Batch{X: xs, Y: ys, W: ws, N: 1, B: 4, T: 6})
		if err != nil {
			t.Fatal(err)
		}
		if mean, _, updates, err := s.IntervalLoss(); err != nil || updates != 1 || math.Abs(mean-loss) > 1e-6*loss {
			t.Fatalf("next interval: %.7g in %d updates (%v), want the one update's %.7g", mean, updates, err, loss)
		}
	})
}
