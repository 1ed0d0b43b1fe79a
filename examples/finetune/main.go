// Command finetune shows post-training end to end, offline: it pretrains
// the tiny preset briefly on a text corpus (the shared Shakespeare text),
// turns held-apart lines of the same text into "continue this line"
// prompt/completion records, fine-tunes the model with LoRA on them, and
// reports the held-out loss over the completions before and after, that
// the base checkpoint is unchanged, and a greedy completion from base and
// from base + adapters.
//
//	go run ./examples/finetune -corpus ../shared/data/tinyshakespeare.txt
//
// The same steps on the command line:
//
//	posttrainllm train --preset tiny --corpus input.txt --steps 300 --out runs/tiny
//	posttrainllm finetune --from runs/tiny --data train.jsonl --valid valid.jsonl --out runs/tiny-lora
//	posttrainllm sample --adapter runs/tiny-lora --prompt "First Citizen:"
package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/posttrainllm/posttrainllm/checkpoint"
	"github.com/posttrainllm/posttrainllm/examples/internal/tinybase"
	"github.com/posttrainllm/posttrainllm/finetune"
	"github.com/posttrainllm/posttrainllm/generate"
	"github.com/posttrainllm/posttrainllm/runfolder"
	"github.com/posttrainllm/posttrainllm/train"
)

func main() {
	corpus := flag.String("corpus", "../shared/data/tinyshakespeare.txt", "text to pretrain on and make records from")
	out := flag.String("out", "", "working folder (default: a temporary one, removed at the end)")
	pretrain := flag.Int("pretrain-steps", 300, "pretraining updates of the tiny preset")
	finetune := flag.Int("finetune-steps", 100, "LoRA updates")
	flag.Parse()
	if err := run(os.Stdout, *corpus, *out, *pretrain, *finetune); err != nil {
		fmt.Fprintln(os.Stderr, "finetune:", err)
		os.Exit(1)
	}
}

func run(w io.Writer, corpus, out string, pretrainSteps, finetuneSteps int) error {
	if pretrainSteps < 1 || finetuneSteps < 2 {
		return fmt.Errorf("-pretrain-steps %d and -finetune-steps %d: want >= 1 and >= 2", pretrainSteps, finetuneSteps)
	}
	out, cleanup, err := tinybase.WorkDir(out, "posttrainllm-finetune-")
	if err != nil {
		return err
	}
	defer cleanup()
	base, err := tinybase.Pretrain(w, corpus, filepath.Join(out, "base"), pretrainSteps)
	if err != nil {
		return err
	}
	trainFile, validFile, prompt, err := writeRecords(corpus, out)
	if err != nil {
		return err
	}
	before, err := fileHash(filepath.Join(base, checkpoint.ModelFile))
	if err != nil {
		return err
	}
	sum, err := loraFineTune(base, trainFile, validFile, filepath.Join(out, "lora"), finetuneSteps)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "lora: %d updates, training loss %.4f -> %.4f, %d trace(s)\n", sum.Step, sum.FirstLoss, sum.Loss, sum.Traces)
	fmt.Fprintf(w, "held-out completion loss: %.4f -> %.4f\n", sum.InitialValLoss, sum.ValLoss)
	after, err := fileHash(filepath.Join(base, checkpoint.ModelFile))
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "base unchanged: %v\n", bytes.Equal(before, after))
	opts := runfolder.SampleOptions{Options: generate.Options{Sampling: generate.Sampling{MaxTokens: 40}}}
	plain, err := runfolder.SampleCheckpoint(base, prompt, "cpu", opts)
	if err != nil {
		return err
	}
	adapted, err := runfolder.SampleAdapted(sum.LastCheckpoint, "", prompt, "cpu", opts)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "prompt:         %q\nbase:           %q\nbase + adapter: %q\n", prompt, plain, adapted)
	return nil
}

// writeRecords makes "continue this line" records from the corpus's
// lines of at least six words: the first three words are the prompt, the
// rest of the line the completion. Every tenth line is held out for
// validation. It returns the two files and a held-out prompt.
func writeRecords(corpus, dir string) (trainFile, validFile, prompt string, err error) {
	text, err := os.ReadFile(corpus)
	if err != nil {
		return "", "", "", err
	}
	var tr, va bytes.Buffer
	n := 0
	for _, line := range strings.Split(string(text), "\n") {
		words := strings.Fields(line)
		if len(words) < 6 {
			continue
		}
		p := strings.Join(words[:3], " ") + " "
		rec, err := json.Marshal(map[string]string{"prompt": p, "completion": strings.Join(words[3:], " ") + "\n"})
		if err != nil {
			return "", "", "", err
		}
		if n++; n%10 == 0 {
			va.Write(append(rec, '\n'))
			if prompt == "" {
				prompt = p
			}
		} else {
			tr.Write(append(rec, '\n'))
		}
	}
	if va.Len() == 0 {
		return "", "", "", errors.New("the corpus has too few lines of six words or more")
	}
	trainFile, validFile = filepath.Join(dir, "train.jsonl"), filepath.Join(dir, "valid.jsonl")
	if err := os.WriteFile(trainFile, tr.Bytes(), 0o644); err != nil {
		return "", "", "", err
	}
	return trainFile, validFile, prompt, os.WriteFile(validFile, va.Bytes(), 0o644)
}

// loraFineTune trains rank-8 LoRA adapters on every projection, with the
// prompts masked out of the loss.
func loraFineTune(base, trainFile, validFile, dir string, steps int) (train.Summary, error) {
	cfg := train.Config{Steps: steps, Batch: 8, Accum: 1, Optimizer: "adamw", Schedule: "cosine",
		LR: 3e-3, MinLR: 3e-4, Warmup: min(10, steps/2), GradClip: 1, Compile: true, Device: "cpu", Seed: 1,
		LogEvery: 10, EvalEvery: steps}
	ft := finetune.Config{Base: base, Method: finetune.MethodLoRA, Rank: 8, Alpha: 16, Targets: []string{"all"},
		Train: trainFile, Valid: validFile, MaskPrompt: true}
	f, err := finetune.New(cfg, ft, dir)
	if err != nil {
		return train.Summary{}, err
	}
	return f.Run(context.Background(), "")
}

func fileHash(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	h := sha256.Sum256(b)
	return h[:], nil
}
