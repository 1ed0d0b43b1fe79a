package finetune

import (
	"encoding/json"
	"fmt"

	"github.com/posttrainllm/posttrainllm/mlx"
	"github.com/posttrainllm/posttrainllm/step"
	"github.com/posttrainllm/posttrainllm/train"
)

// probe is the plan probe of the fine-tune's step (train.ChooseStepPlan): each
// candidate micro-batch runs the step the fine-tune will run, over
// freshly initialised base weights (quantized, with adapters, or trained
// in full as the fine-tune says) and synthetic rows of the fine-tune's
// row length in which every target counts.
func (k *fineTuneTask) probe() train.StepProbe {
	T := k.f.Train.T
	ft := k.f.FineTune
	ft.Base, ft.Train, ft.Valid = "", "", ""
	settings, _ := json.Marshal(ft)
	return train.StepProbe{
		Step:       fmt.Sprintf("fine-tune of rows of %d tokens %s", T, settings),
		LowerBound: func(c train.Config) float64 { return fineTuneMinMemory(c, k.f.FineTune, T) },
		Peak: func(c train.Config) (uint64, error) {
			base, err := k.f.Model.Init(c.Seed)
			if err != nil {
				return 0, err
			}
			// Deferred calls run last first: the buffers go back to the
			// system once the state and the step have released them.
			defer mlx.ClearCache()
			// A base stored quantized is probed in float: an upper bound.
			if err := k.f.Objective.Check(c); err != nil {
				mlx.Free(base...)
				return 0, fmt.Errorf("micro-batch %d: %w", c.Batch, err)
			}
			a, err := k.newAdapter(c)
			if err != nil {
				mlx.Free(base...)
				return 0, err
			}
			b, err := k.build(c, train.Plan{MicroBatch: c.Batch, Steps: c.Accum}, nil, a, base, nil, "")
			if err != nil {
				return 0, err
			}
			defer b.free()
			rows := probeRows(c, T, b.step.Layout().Inputs == step.PackedInputs)
			if l := b.step.Layout(); l.Inputs == step.RowInputs {
				rows = probePairs(rows, l.RowInputs)
			}
			return train.ProbeUpdates(b.state, rows)
		},
	}
}

// fineTuneMinMemory is a lower bound on the memory a fine-tune of c with
// rows of T tokens needs: the float32 logits of a microbatch's rows and,
// unless the base is quantized, the base weights in their dtype. It is
// computed in float64, so absurd sizes cannot overflow.
func fineTuneMinMemory(c train.Config, ft Config, T int) float64 {
	m := c.Model
	need := float64(c.ForwardBatch()) * float64(T) * float64(m.PaddedVocab()) * float64(mlx.Float32.Size())
	if ft.Quantize == 0 {
		need += m.ParamCount() * float64(m.ParamDtype().Size())
	}
	return need
}

// probeRows is the synthetic batch of a fine-tune probe: c.Accum
// microbatches of c.Batch rows of T tokens, every target counting, with
// segments when the rows are packed (one example a row).
func probeRows(c train.Config, T int, packed bool) step.Batch {
	n := c.Accum * c.Batch * T
	b := step.Batch{X: make([]int32, n), Y: make([]int32, n), W: make([]float32, n), N: c.Accum, B: c.Batch, T: T}
	for i := range b.X {
		b.X[i], b.Y[i], b.W[i] = int32(i%c.Model.VocabSize), int32((i+1)%c.Model.VocabSize), 1
	}
	if packed {
		b.Seg = make([]int32, n)
	}
	return b
}

// probePairs is a probe batch b taken as rows of a RowInputs step, in
// pairs: each pair's weight on its chosen row, and inputs more row inputs
// of zeros (the reference log-probabilities of a full DPO fine-tune).
func probePairs(b step.Batch, inputs int) step.Batch {
	b.RowW = make([]float32, b.N*b.B)
	for r := range b.RowW {
		b.RowW[r] = float32(1 - r%2)
	}
	for range inputs {
		b.RowInputs = append(b.RowInputs, make([]float32, b.N*b.B))
	}
	return b
}
