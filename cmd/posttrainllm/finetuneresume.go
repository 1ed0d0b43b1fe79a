package main

import (
	"path/filepath"
	"strings"

	"github.com/spf13/pflag"

	"github.com/posttrainllm/posttrainllm/checkpoint"
	"github.com/posttrainllm/posttrainllm/finetune"
)

// checkFinetuneResume accepts the fine-tune's own flags beside --resume
// when they equal the resumed fine-tune's settings (finetune.json), so the
// command line that started it, with --resume added, continues it; it
// names the first flag that differs (finetune.Config.ResumeConflict
// decides). baseContext is the base model's context, what a fine-tune
// without --context trained on.
func checkFinetuneResume(flags *pflag.FlagSet, opts finetuneOptions, saved finetune.Config, dir string, baseContext int) error {
	if flags.Changed("epochs") {
		return usageError("--epochs with --resume: a resumed fine-tune keeps its steps; pass --steps N to run to step N")
	}
	given := finetune.Config{Base: resolvedCheckpoint(opts.from), Train: absPath(opts.data), Valid: absPath(opts.valid),
		Method: opts.method, Rank: opts.rank, Alpha: opts.alpha, Targets: opts.targets, MaskPrompt: opts.maskPrompt,
		Pack: opts.pack, Context: opts.context, Quantize: opts.quantize, QGroupSize: opts.qGroupSize,
		Objective: finetune.ObjectiveName(opts.objective), Beta: opts.beta, Lambda: opts.orpoLambda, Gamma: opts.simpoGamma}
	opts.grpo.set(&given)
	flagOf := map[string]string{}
	var keys []string
	for _, f := range finetuneOwnFlags {
		if flags.Changed(f.flag) {
			keys, flagOf[f.key] = append(keys, f.key), f.flag
		}
	}
	if len(keys) == 0 {
		return nil
	}
	key, has, _, err := saved.ResumeConflict(given, keys, baseContext)
	if err != nil {
		return err
	}
	if key != "" {
		name := flagOf[key]
		return usageError("invalid --%s %s with --resume: %s fine-tunes with %s %s; a resumed fine-tune keeps its settings (finetune.json), drop --%s",
			name, flags.Lookup(name).Value.String(), dir, name, has, name)
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

// objectiveNames lists the built-in objectives (finetune.ObjectiveNames) for
// --objective's usage.
func objectiveNames() string {
	names := finetune.ObjectiveNames()
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = string(n)
	}
	return strings.Join(out, ", ")
}
