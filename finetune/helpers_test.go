package finetune

import (
	"testing"

	"github.com/posttrainllm/posttrainllm/mlx"
	"github.com/posttrainllm/posttrainllm/model"
	"github.com/posttrainllm/posttrainllm/optim"
	"github.com/posttrainllm/posttrainllm/peft"
	"github.com/posttrainllm/posttrainllm/step"
	"github.com/posttrainllm/posttrainllm/train"
)

// fullLoss is SFT's loss of a full fine-tune of m.
func fullLoss(m *model.Transformer) step.Loss { return SupervisedObjective{}.Loss(Policy{Model: m}) }

// adapterLoss is SFT's loss of fine-tuning m through adapter a.
func adapterLoss(m *model.Transformer, a *peft.Adapter) step.Loss {
	return SupervisedObjective{}.Loss(Policy{Model: m, Adapter: a})
}

// packedFullLoss is SFT's loss of a full fine-tune of m over packed rows.
func packedFullLoss(m *model.Transformer) step.Loss {
	return SupervisedObjective{Pack: true}.Loss(Policy{Model: m})
}

// hostNormalize divides w by its sum, as the step does with row and loss
// weights, and returns the sum.
func hostNormalize(w []float32) ([]float32, float64) {
	total := 0.0
	for _, v := range w {
		total += float64(v)
	}
	out, inv := make([]float32, len(w)), 1/total
	for i, v := range w {
		out[i] = float32(float64(v) * inv)
	}
	return out, total
}

// plainSGD updates p ← p − lr·g, so a step's parameter change is −lr × the
// averaged gradient.
func plainSGD(t testing.TB, m *model.Transformer) optim.Optimizer {
	t.Helper()
	oc := optim.DefaultConfig()
	oc.SGD.Momentum, oc.SGD.WeightDecay = 0, 0
	o, err := optim.New("sgd", train.OptimizerParams(m.Specs), oc)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// sgdStep is a compiled step of loss over all of m's parameters, trained
// with plainSGD, in layout (its Trainable and State filled in here) and
// opts; it returns the step, freed when the test ends, and the optimizer
// state.
func sgdStep(t testing.TB, m *model.Transformer, loss step.Loss, layout step.Layout, opts step.StepOptions) (*step.Step, []*mlx.Array) {
	t.Helper()
	opt := plainSGD(t, m)
	state, err := opt.Init()
	if err != nil {
		t.Fatal(err)
	}
	layout.Trainable, layout.State = len(m.Specs), len(state)
	s, err := step.NewStep(loss, opt, layout, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Free)
	return s, state
}
