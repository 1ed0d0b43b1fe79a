// Command preference shows preference optimisation end to end, offline:
// it pretrains the tiny preset briefly on a text corpus (the shared
// Shakespeare text), turns lines of the same text into preference pairs
// whose chosen answer is the line's continuation ending in " amen" and
// whose rejected answer is the same continuation ending in " alas", trains
// LoRA adapters with DPO on them (the reference model is the base with
// the adapters switched off, inside the same compiled step), and reports
// the held-out preference accuracy and reward margin before and after.
//
//	go run ./examples/preference -corpus ../shared/data/tinyshakespeare.txt
//
// The same steps on the command line:
//
//	posttrainllm train --preset tiny --corpus input.txt --steps 300 --out runs/tiny
//	posttrainllm finetune --from runs/tiny --data pairs.jsonl --valid pairs-valid.jsonl --objective dpo --out runs/tiny-dpo
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

	"github.com/posttrainllm/posttrainllm/examples/internal/tinybase"
	"github.com/posttrainllm/posttrainllm/finetune"
	"github.com/posttrainllm/posttrainllm/train"
)

func main() {
	corpus := flag.String("corpus", "../shared/data/tinyshakespeare.txt", "text to pretrain on and make pairs from")
	out := flag.String("out", "", "working folder (default: a temporary one, removed at the end)")
	pretrain := flag.Int("pretrain-steps", 300, "pretraining updates of the tiny preset")
	dpo := flag.Int("dpo-steps", 60, "DPO updates of the LoRA adapters")
	flag.Parse()
	if err := run(os.Stdout, *corpus, *out, *pretrain, *dpo); err != nil {
		fmt.Fprintln(os.Stderr, "preference:", err)
		os.Exit(1)
	}
}

func run(w io.Writer, corpus, out string, pretrainSteps, dpoSteps int) error {
	if pretrainSteps < 1 || dpoSteps < 2 {
		return fmt.Errorf("-pretrain-steps %d and -dpo-steps %d: want >= 1 and >= 2", pretrainSteps, dpoSteps)
	}
	out, cleanup, err := tinybase.WorkDir(out, "posttrainllm-preference-")
	if err != nil {
		return err
	}
	defer cleanup()
	base, err := tinybase.Pretrain(w, corpus, filepath.Join(out, "base"), pretrainSteps)
	if err != nil {
		return err
	}
	trainFile, validFile, err := writePairs(corpus, out)
	if err != nil {
		return err
	}
	sum, err := dpoFineTune(base, trainFile, validFile, filepath.Join(out, "dpo"), dpoSteps)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "dpo: %d updates, loss %.4f -> %.4f, %d trace(s)\n", sum.Step, sum.FirstLoss, sum.Loss, sum.Traces)
	if sum.InitialValAux == nil || sum.ValAux == nil {
		return errors.New("the fine-tune measured no held-out preference")
	}
	b, a := sum.InitialValAux, sum.ValAux
	fmt.Fprintf(w, "held-out preference accuracy: %.3f -> %.3f over %d pairs\n", b["accuracy"], a["accuracy"], sum.ValRows)
	fmt.Fprintf(w, "held-out reward margin: %.4f -> %.4f\n", b["margin"], a["margin"])
	return nil
}

// writePairs makes preference pairs from the corpus's lines of at least
// six words: the first three words are the prompt, the rest of the line
// both answers, the chosen one ending in " amen" and the rejected one in
// " alas". Every tenth line is held out for validation, up to 64 pairs.
func writePairs(corpus, dir string) (trainFile, validFile string, err error) {
	text, err := os.ReadFile(corpus)
	if err != nil {
		return "", "", err
	}
	var tr, va bytes.Buffer
	n, held := 0, 0
	for _, line := range strings.Split(string(text), "\n") {
		words := strings.Fields(line)
		if len(words) < 6 || len(words) > 12 {
			continue
		}
		rest := strings.Join(words[3:], " ")
		rec, err := json.Marshal(map[string]string{"prompt": strings.Join(words[:3], " ") + " ",
			"chosen": rest + " amen\n", "rejected": rest + " alas\n"})
		if err != nil {
			return "", "", err
		}
		if n++; n%10 == 0 && held < 64 {
			va.Write(append(rec, '\n'))
			held++
		} else {
			tr.Write(append(rec, '\n'))
		}
	}
	if va.Len() == 0 {
		return "", "", errors.New("the corpus has too few lines of six to twelve words")
	}
	trainFile, validFile = filepath.Join(dir, "pairs.jsonl"), filepath.Join(dir, "pairs-valid.jsonl")
	if err := os.WriteFile(trainFile, tr.Bytes(), 0o644); err != nil {
		return "", "", err
	}
	return trainFile, validFile, os.WriteFile(validFile, va.Bytes(), 0o644)
}

// dpoFineTune trains rank-8 LoRA adapters on every projection with DPO
// (β 0.1), 8 pairs per update, and measures the held-out pairs before
// and after.
func dpoFineTune(base, trainFile, validFile, dir string, steps int) (train.Summary, error) {
	cfg := train.Config{Steps: steps, Batch: 16, Accum: 1, Optimizer: "adamw", Schedule: "cosine",
		LR: 3e-3, MinLR: 3e-4, Warmup: min(10, steps/2), GradClip: 1, Compile: true, Device: "cpu", Seed: 1,
		LogEvery: 10, EvalEvery: steps}
	ft := finetune.Config{Base: base, Method: finetune.MethodLoRA, Rank: 8, Alpha: 16, Targets: []string{"all"},
		Train: trainFile, Valid: validFile, MaskPrompt: true, Context: 64, Objective: finetune.DPO}
	f, err := finetune.New(cfg, ft, dir)
	if err != nil {
		return train.Summary{}, err
	}
	return f.Run(context.Background(), "")
}
