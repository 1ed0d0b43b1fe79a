// Command customloop writes its own training loop on posttrainllm's
// compiled step: its own loss (cross-entropy with label smoothing), its own
// learning-rate schedule (linear warm-up, then inverse square root) and its
// own data (a synthetic, learnable token pattern), with no Trainer.
//
//	go run ./examples/customloop -steps 100
//
// The learning rate reaches the step as an input array each update, so the
// step is traced once however the rate changes; the program prints the
// number of traces at the end. A step.State owns the parameters and the
// optimizer state: the loop frees nothing.
package main

import (
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"

	"github.com/posttrainllm/posttrainllm/mlx"
	"github.com/posttrainllm/posttrainllm/model"
	"github.com/posttrainllm/posttrainllm/optim"
	"github.com/posttrainllm/posttrainllm/step"
	"github.com/posttrainllm/posttrainllm/train"
)

func main() {
	steps := flag.Int("steps", 60, "optimizer updates")
	accum := flag.Int("accum", 2, "microbatches per update")
	flag.Parse()
	if err := run(os.Stdout, *steps, *accum); err != nil {
		fmt.Fprintln(os.Stderr, "customloop:", err)
		os.Exit(1)
	}
}

const (
	vocab     = 64
	context   = 32
	batch     = 8
	smoothing = 0.1
	peakLR    = 3e-3
	warmup    = 10
)

// smoothedLoss is cross-entropy against targets mixed with a uniform
// distribution: (1−ε)·CE + ε·mean over the vocabulary of −log p. It is
// built from the model's logits with plain mlx ops, so it traces into the
// compiled step like the model's own loss.
func smoothedLoss(m *model.Transformer) step.Loss {
	return step.MeanLoss(func(params []*mlx.Array, x, y *mlx.Array) *mlx.Array {
		logits := mlx.AsType(m.Logits(params, x), mlx.Float32) // [B, T, V]
		lse := mlx.LogSumExpKeep(logits, -1)                   // [B, T, 1]
		logp := mlx.Subtract(logits, lse)
		nll := mlx.Negative(mlx.Squeeze(mlx.TakeAlongAxis(logp, mlx.ExpandDims(y, -1), -1), -1))
		uniform := mlx.Negative(mlx.Mean(logp, -1))
		return mlx.Mean(mlx.Add(mlx.MulScalar(nll, 1-smoothing), mlx.MulScalar(uniform, smoothing)))
	})
}

// lrAt is the schedule: linear warm-up to peakLR, then peakLR·√(warmup/step).
func lrAt(step int) float64 {
	if step < warmup {
		return peakLR * float64(step+1) / warmup
	}
	return peakLR * math.Sqrt(float64(warmup)/float64(step+1))
}

// fillBatch writes accum×batch windows of a repeating pattern with random
// offsets: token i of a window is (start + i·stride) mod vocab, so the next
// token follows from the previous two.
func fillBatch(rng *rand.Rand, x, y []int32) {
	for w := 0; w < len(x)/context; w++ {
		start, stride := rng.IntN(vocab), 1+rng.IntN(7)
		for i := 0; i < context; i++ {
			x[w*context+i] = int32((start + i*stride) % vocab)
			y[w*context+i] = int32((start + (i+1)*stride) % vocab)
		}
	}
}

func run(w io.Writer, steps, accum int) error {
	if steps < 1 || accum < 1 {
		return fmt.Errorf("steps = %d and accum = %d, want both >= 1", steps, accum)
	}
	m, err := model.New(model.Config{VocabSize: vocab, DModel: 64, Layers: 2, Heads: 4, Context: context})
	if err != nil {
		return err
	}
	opt, err := optim.New("adamw", train.OptimizerParams(m.Specs), optim.DefaultConfig())
	if err != nil {
		return err
	}
	// The step is built once: accum is part of the compiled function.
	update, err := step.NewStep(smoothedLoss(m), opt, step.Layout{Trainable: len(m.Specs), State: len(opt.StateNames())},
		step.StepOptions{Accum: accum, GradClip: 1, Compile: true})
	if err != nil {
		return err
	}
	defer update.Free()
	// The state owns parameters and optimizer state; each update releases
	// what it replaces.
	state, err := step.InitState(update, m, 1)
	if err != nil {
		return err
	}
	defer state.Free()

	rng := rand.New(rand.NewPCG(1, 2))
	b := step.Batch{X: make([]int32, accum*batch*context), Y: make([]int32, accum*batch*context),
		N: accum, B: batch, T: context}
	for s := 0; s < steps; s++ {
		fillBatch(rng, b.X, b.Y)
		loss, err := state.Update(lrAt(s), b)
		if err != nil {
			return err
		}
		if s%10 == 0 || s == steps-1 {
			fmt.Fprintf(w, "step %4d  lr %.2e  loss %.4f\n", s+1, lrAt(s), loss)
		}
	}
	fmt.Fprintf(w, "traces %d\n", update.Traces())
	return nil
}
