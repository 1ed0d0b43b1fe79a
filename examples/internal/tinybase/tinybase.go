// Package tinybase is what the fine-tuning examples start from: the tiny
// preset pretrained briefly on a text corpus, as `posttrainllm train
// --preset tiny --corpus FILE --steps N` would train it.
package tinybase

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/posttrainllm/posttrainllm/presets"
	"github.com/posttrainllm/posttrainllm/pretrain"
)

// Pretrain runs steps updates of the tiny preset on corpus into run
// folder dir, without evaluations or intermediate checkpoints, prints one
// line about it to w and returns the final checkpoint.
func Pretrain(w io.Writer, corpus, dir string, steps int) (string, error) {
	cfg, err := presets.Load("tiny")
	if err != nil {
		return "", err
	}
	abs, err := filepath.Abs(corpus)
	if err != nil {
		return "", err
	}
	cfg.Corpus, cfg.Steps, cfg.EvalEvery, cfg.CheckpointEvery, cfg.Warmup = abs, steps, 0, 0, min(cfg.Warmup, steps/2)
	cache, err := os.MkdirTemp("", "posttrainllm-example-tokens-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(cache)
	ds, err := pretrain.OpenDataset(cfg.Corpus, cfg.Tokenizer, cache, cfg.Model.Context, cfg.ValFraction)
	if err != nil {
		return "", err
	}
	defer ds.Close()
	tr, err := pretrain.New(cfg, ds, dir)
	if err != nil {
		return "", err
	}
	sum, err := tr.Run(context.Background(), "")
	if err != nil {
		return "", err
	}
	fmt.Fprintf(w, "pretrain: %d updates of the tiny preset, loss %.4f -> %.4f\n", sum.Step, sum.FirstLoss, sum.Loss)
	return sum.LastCheckpoint, nil
}

// WorkDir returns out, or where out is "" a new temporary folder named
// after prefix, with the function that removes what it made (nothing for
// a folder the caller named).
func WorkDir(out, prefix string) (string, func(), error) {
	if out != "" {
		return out, func() {}, nil
	}
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		return "", nil, err
	}
	return dir, func() { os.RemoveAll(dir) }, nil
}
