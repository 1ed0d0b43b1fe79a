// Command objective shows a fine-tuning objective written outside package
// finetune: label-smoothed supervised fine-tuning, (1−ε)·NLL + ε·(mean over
// the vocabulary of −log p) per counted target, with the plain NLL as a
// named auxiliary metric of the compiled step. It implements
// finetune.Objective (rows, layout, loss, run), borrowing SFT's rows, feed
// and held-out evaluation, and trains through the same loop as the
// built-in objectives: it pretrains the tiny preset briefly, fine-tunes it
// with LoRA on "continue this line" records, and reports the training
// loss and NLL, the held-out loss before and after, and the traces.
//
//	go run ./examples/objective -corpus ../shared/data/tinyshakespeare.txt
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/posttrainllm/posttrainllm/data"
	"github.com/posttrainllm/posttrainllm/examples/internal/tinybase"
	"github.com/posttrainllm/posttrainllm/finetune"
	"github.com/posttrainllm/posttrainllm/mlx"
	"github.com/posttrainllm/posttrainllm/step"
	"github.com/posttrainllm/posttrainllm/train"
)

func main() {
	corpus := flag.String("corpus", "../shared/data/tinyshakespeare.txt", "text to pretrain on and make records from")
	out := flag.String("out", "", "working folder (default: a temporary one, removed at the end)")
	pretrain := flag.Int("pretrain-steps", 300, "pretraining updates of the tiny preset")
	finetune := flag.Int("finetune-steps", 100, "LoRA updates")
	flag.Parse()
	if err := run(os.Stdout, *corpus, *out, *pretrain, *finetune); err != nil {
		fmt.Fprintln(os.Stderr, "objective:", err)
		os.Exit(1)
	}
}

// smoothed is label-smoothed SFT with smoothing Epsilon.
type smoothed struct {
	Epsilon float64
	sft     finetune.SupervisedObjective
}

// Name is the objective's name in finetune.json.
func (smoothed) Name() string { return "sft-smoothed" }

// Check accepts any run, as SFT does.
func (o smoothed) Check(cfg train.Config) error { return o.sft.Check(cfg) }

// Rows are SFT's: chat or prompt/completion records.
func (o smoothed) Rows(src finetune.RowSource) (*data.Rows, error) { return o.sft.Rows(src) }

// Layout is SFT's weighted tokens, with the plain NLL as an auxiliary sum.
func (o smoothed) Layout(p finetune.Policy) step.Layout {
	l := o.sft.Layout(p)
	l.Aux = []string{"nll"}
	return l
}

// Loss is Σ w·((1−ε)·NLL + ε·uniform) over the microbatch, and Σ w·NLL.
// The weights come normalised over the whole update, so the step's sums
// are means per counted target.
func (o smoothed) Loss(p finetune.Policy) step.Loss {
	eps := o.Epsilon
	return func(trainable, frozen []*mlx.Array, mb step.Microbatch) (*mlx.Array, []*mlx.Array) {
		logits := mlx.AsType(p.Logits(trainable, frozen, mb.X), mlx.Float32) // [B, T, V]
		logp := mlx.Subtract(logits, mlx.LogSumExpKeep(logits, -1))
		nll := mlx.Negative(mlx.Squeeze(mlx.TakeAlongAxis(logp, mlx.ExpandDims(mb.Y, -1), -1), -1))
		uniform := mlx.Negative(mlx.Mean(logp, -1))
		loss := mlx.Add(mlx.MulScalar(nll, 1-eps), mlx.MulScalar(uniform, eps))
		return mlx.Sum(mlx.Multiply(loss, mb.W)), []*mlx.Array{mlx.Sum(mlx.Multiply(nll, mb.W))}
	}
}

// Start is SFT's: its feed of rows and its held-out loss.
func (o smoothed) Start(env finetune.ObjectiveEnv) (finetune.ObjectiveRun, error) {
	return o.sft.Start(env)
}

func run(w io.Writer, corpus, out string, pretrainSteps, finetuneSteps int) error {
	if pretrainSteps < 1 || finetuneSteps < 2 {
		return fmt.Errorf("-pretrain-steps %d and -finetune-steps %d: want >= 1 and >= 2", pretrainSteps, finetuneSteps)
	}
	out, cleanup, err := tinybase.WorkDir(out, "posttrainllm-objective-")
	if err != nil {
		return err
	}
	defer cleanup()
	base, err := tinybase.Pretrain(w, corpus, filepath.Join(out, "base"), pretrainSteps)
	if err != nil {
		return err
	}
	trainFile, validFile, err := writeRecords(corpus, out)
	if err != nil {
		return err
	}
	cfg := train.Config{Steps: finetuneSteps, Batch: 8, Accum: 1, Optimizer: "adamw", Schedule: "cosine",
		LR: 3e-3, MinLR: 3e-4, Warmup: min(10, finetuneSteps/2), GradClip: 1, Compile: true, Device: "cpu", Seed: 1,
		LogEvery: 10, EvalEvery: finetuneSteps}
	ft := finetune.Config{Base: base, Method: finetune.MethodLoRA, Rank: 8, Alpha: 16, Targets: []string{"all"},
		Train: trainFile, Valid: validFile, MaskPrompt: true}
	f, err := finetune.NewWithObjective(cfg, ft, smoothed{Epsilon: 0.1}, filepath.Join(out, "smoothed"))
	if err != nil {
		return err
	}
	var first, last map[string]float64
	f.Hooks.OnLog = func(m train.Metrics) {
		if m.Aux != nil && first == nil {
			first = m.Aux
		}
		if m.Aux != nil {
			last = m.Aux
		}
	}
	sum, err := f.Run(context.Background(), "")
	if err != nil {
		return err
	}
	if first == nil {
		return errors.New("the fine-tune logged no nll")
	}
	fmt.Fprintf(w, "%s: %d updates, loss %.4f -> %.4f, nll %.4f -> %.4f, %d trace(s)\n",
		f.FineTune.Objective, sum.Step, sum.FirstLoss, sum.Loss, first["nll"], last["nll"], sum.Traces)
	fmt.Fprintf(w, "held-out completion loss: %.4f -> %.4f\n", sum.InitialValLoss, sum.ValLoss)
	return nil
}

// writeRecords makes "continue this line" records from the corpus's
// lines of at least six words: the first three words are the prompt, the
// rest of the line the completion. Every tenth line is held out.
func writeRecords(corpus, dir string) (trainFile, validFile string, err error) {
	text, err := os.ReadFile(corpus)
	if err != nil {
		return "", "", err
	}
	var tr, va bytes.Buffer
	n := 0
	for _, line := range strings.Split(string(text), "\n") {
		words := strings.Fields(line)
		if len(words) < 6 {
			continue
		}
		rec, err := json.Marshal(map[string]string{"prompt": strings.Join(words[:3], " ") + " ", "completion": strings.Join(words[3:], " ") + "\n"})
		if err != nil {
			return "", "", err
		}
		if n++; n%10 == 0 {
			va.Write(append(rec, '\n'))
		} else {
			tr.Write(append(rec, '\n'))
		}
	}
	if va.Len() == 0 {
		return "", "", errors.New("the corpus has too few lines of six words or more")
	}
	trainFile, validFile = filepath.Join(dir, "train.jsonl"), filepath.Join(dir, "valid.jsonl")
	if err := os.WriteFile(trainFile, tr.Bytes(), 0o644); err != nil {
		return "", "", err
	}
	return trainFile, validFile, os.WriteFile(validFile, va.Bytes(), 0o644)
}
