package main

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/spf13/pflag"

	"github.com/posttrainllm/posttrainllm/checkpoint"
	"github.com/posttrainllm/posttrainllm/train"
)

// checkFinetuneResume accepts the fine-tune's own flags beside --resume
// when they equal the resumed fine-tune's settings (finetune.json), so the
// command line that started it, with --resume added, continues it; it
// names the first flag that differs. baseContext is the base model's
// context, what a fine-tune without --context trained on.
func checkFinetuneResume(flags *pflag.FlagSet, opts finetuneOptions, saved train.FineTuneConfig, dir string, baseContext int) error {
	if flags.Changed("epochs") {
		return usageError("--epochs with --resume: a resumed fine-tune keeps its steps; pass --steps N to run to step N")
	}
	savedContext := saved.Context
	if savedContext == 0 {
		savedContext = baseContext
	}
	for _, name := range finetuneOwnFlags {
		if !flags.Changed(name) {
			continue
		}
		var given, has string
		switch name {
		case "from":
			given, has = resolvedCheckpoint(opts.from), saved.Base
		case "data":
			given, has = absPath(opts.data), saved.Train
		case "valid":
			given, has = absPath(opts.valid), saved.Valid
		case "method":
			given, has = opts.method, saved.Method
		case "rank":
			given, has = fmt.Sprint(opts.rank), fmt.Sprint(saved.Rank)
		case "alpha":
			given, has = fmt.Sprint(opts.alpha), fmt.Sprint(saved.Alpha)
		case "targets":
			given, has = strings.Join(opts.targets, ","), strings.Join(saved.Targets, ",")
		case "mask-prompt":
			given, has = fmt.Sprint(opts.maskPrompt), fmt.Sprint(saved.MaskPrompt)
		case "pack":
			given, has = fmt.Sprint(opts.pack), fmt.Sprint(saved.Pack)
		case "context":
			given, has = fmt.Sprint(opts.context), fmt.Sprint(savedContext)
		case "objective":
			given, has = opts.objective, string(saved.Objective)
			if has == "" {
				has = string(train.SFT)
			}
		case "beta":
			given, has = fmt.Sprint(opts.beta), fmt.Sprint(saved.Beta)
		case "orpo-lambda":
			given, has = fmt.Sprint(opts.orpoLambda), fmt.Sprint(saved.Lambda)
		case "simpo-gamma":
			given, has = fmt.Sprint(opts.simpoGamma), fmt.Sprint(saved.Gamma)
		}
		if given != has {
			return usageError("invalid --%s %s with --resume: %s fine-tunes with %s %s; a resumed fine-tune keeps its settings (finetune.json), drop --%s",
				name, flags.Lookup(name).Value.String(), dir, name, has, name)
		}
	}
	return nil
}

// resolvedCheckpoint is the absolute checkpoint directory path names, as
// finetune.json records a base, or path itself when it names none.
func resolvedCheckpoint(path string) string {
	dir, err := checkpoint.Resolve(path)
	if err != nil {
		return path
	}
	return absPath(dir)
}

// absPath is path made absolute, or path itself when that fails.
func absPath(path string) string {
	if abs, err := filepath.Abs(path); err == nil {
		return abs
	}
	return path
}
