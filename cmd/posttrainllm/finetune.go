package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/posttrainllm/posttrainllm/data"
	"github.com/posttrainllm/posttrainllm/finetune"
	"github.com/posttrainllm/posttrainllm/train"
)

// finetuneOptions are the finetune command's flags: the fine-tune's
// settings (finetune.Settings' flags fill req) and the command's own.
type finetuneOptions struct {
	req                   finetune.Request
	out, planCache        string
	overwrite, noProgress bool
	nproc                 int
}

// finetuneSkipped are the config flags a fine-tune does not take: the
// model, tokenizer and corpus are the base checkpoint's. Token shards,
// their prefetching and BPE-dropout feed pretraining; GaLore's and
// Sophia's refreshes run beside the pretraining step only.
var finetuneSkipped = []string{"vocab", "pad-vocab-to", "d-model", "layers", "heads", "context", "mlp-ratio",
	"dtype", "master-fp32", "tied-embeddings", "embed-norm", "z-loss", "rope-base", "norm-eps", "init-std",
	"gelu", "tokenizer", "corpus", "val-fraction", "prefetch-depth",
	"data", "val-data", "bpe-dropout", "galore-rank", "galore-gap", "galore-scale", "sophia-every", "sophia-rho"}

func newFinetuneCmd() *cobra.Command {
	var opts finetuneOptions
	cmd := &cobra.Command{
		Use:   "finetune",
		Short: "Fine-tune a checkpoint on jsonl records with LoRA, DoRA or all weights",
		Long: `finetune trains a checkpoint (--from) further on the jsonl records of --data,
each line {"text": …}, {"prompt": …, "completion": …} or {"messages":
[{"role": "user", "content": …}, …]}, rendered with the chat template of
docs/finetuning.md. With --mask-prompt (the default) only completions and
assistant turns count in the loss; role headers never do. The loss is the
mean over the counted tokens of each whole update, across all --accum
microbatches. Each example is one sequence of --context tokens (default
and at most the base model's context), cut or padded to it; --pack
concatenates examples instead, each attending only within itself.

--method lora (default) or dora trains rank --rank adapters scaled by
--alpha/--rank on the projections --targets names (attn, mlp, all, or
wq, wk, wv, wo, w1, w2); the base weights stay frozen, and checkpoints hold
only the adapters (adapters.safetensors) and finetune.json. --method full
trains every weight and writes ordinary checkpoints. --quantize 4 (or 8)
holds the frozen base quantized and trains the adapters over it (QLoRA);
--grad-checkpoint recomputes each block's activations in the backward
pass, and --loss-chunk bounds the loss's logits (docs/finetuning.md).
--micro-batch runs each update's rows in smaller forward passes: auto
(the default) takes the batch as given on the CPU and, on a GPU, the
largest micro-batch whose fine-tune step a probe measured within
--memory-budget; the update is the same whatever the plan.

Fine-tunes have settings of their own, not the base run's: 200 steps
(--epochs N instead runs N passes over the training sequences), batch 4,
AdamW on a cosine schedule from --lr, by default ` + fmt.Sprint(finetune.DefaultAdapterLR) + `
for adapters and ` + fmt.Sprint(finetune.DefaultFullLR) + ` for a full fine-tune, down to a
tenth of it (--min-lr).

The run folder --out is like train's: metrics.jsonl, tb/ (TensorBoard),
checkpoints/, loss.png; with --valid, the held-out loss over its counted
tokens is logged every --eval-every updates, over its first --eval-tokens
positions. --resume continues a fine-tune exactly, and accepts the flags
that started it; Ctrl-C writes a checkpoint first. Sample with
posttrainllm sample --adapter RUN, or merge with posttrainllm fuse.

--nproc N runs N data-parallel ranks on this machine as train does (see
posttrainllm train --help): rank r takes rows r·B … (r+1)·B−1 of each
microbatch that one process with --batch N·B would draw, and the loss of
an update is the mean over the counted targets of all ranks' rows, so N
ranks × --batch B fine-tune as one process with --batch N·B. --epochs
counts the rows of all ranks. Pass the same --nproc to --resume.

--objective dpo, ipo, orpo or simpo optimises a preference objective
instead of the supervised loss (sft, the default): --data and --valid
then hold preference records, {"prompt": …, "chosen": …, "rejected": …}
or {"chosen": [messages…], "rejected": [messages…]}, each pair's answers
two rows of one microbatch (so --batch must be even), their prompts
masked. --beta sets DPO's and IPO's β (default 0.1) and SimPO's (2),
--simpo-gamma SimPO's target margin (1), --orpo-lambda ORPO's weight (0.1).
DPO and IPO compare with the base model: with adapters it is the same
forward pass with the adapters switched off, inside the step; a full
fine-tune computes its log-probabilities once before training and keeps
them in the run folder (reference_logprobs.json). The metrics add the
rewards of the chosen and rejected answers, their margin and the share of
pairs won, on training batches and on --valid (docs/finetuning.md).

` + grpoHelp,
		Example: `  posttrainllm finetune --from runs/tiny --data train.jsonl --valid valid.jsonl --out runs/tiny-lora
  posttrainllm finetune --from runs/tiny --data chat.jsonl --method dora --rank 16 --alpha 32 --targets all
  posttrainllm finetune --from runs/tiny --data train.jsonl --method full --lr 1e-4 --out runs/tiny-sft
  posttrainllm finetune --from runs/smollm --data chat.jsonl --context 512 --epochs 3 --out runs/smollm-lora
  posttrainllm finetune --from runs/smollm2 --data chat.jsonl --quantize 4 --grad-checkpoint --targets all
  posttrainllm finetune --from runs/tiny --data train.jsonl --batch 4 --nproc 2 --out runs/tiny-lora-dp
  posttrainllm finetune --from runs/tiny-sft --data pairs.jsonl --valid pairs-valid.jsonl --objective dpo --beta 0.1 --out runs/tiny-dpo
  posttrainllm finetune --from runs/smollm2 --data prompts.jsonl --valid heldout.jsonl --objective grpo --targets all --group-size 8 --max-completion 64 --reward exact:1,format:0.2 --batch 32
  posttrainllm finetune --resume runs/tiny-lora --steps 400`,
		Args: cobra.NoArgs,
	}
	fs := cmd.Flags()
	addSettingFlags(fs, &opts.req)
	fs.StringVar(&opts.out, "out", "", "run folder (default runs/finetune, or the resumed run's folder)")
	fs.BoolVar(&opts.overwrite, "overwrite", false, "replace the run in --out (its checkpoints, metrics and plot)")
	fs.BoolVar(&opts.noProgress, "no-progress", false, "plain log lines instead of a progress bar")
	fs.StringVar(&opts.planCache, "plan-cache", "", "folder of probed micro-batch plans kept for later runs (default $XDG_CACHE_HOME/posttrainllm/plans; off probes every time)")
	fs.IntVar(&opts.nproc, "nproc", 1, "data-parallel ranks to start on this machine (see below)")
	ov := addConfigFlags(fs, finetuneSkipped...)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error { return runFinetune(cmd, opts, ov) }
	return cmd
}

// finetunePlan is a validated finetune command.
type finetunePlan struct {
	cfg        train.Config
	ft         finetune.Config
	out        string
	checkpoint string  // resumed checkpoint, or ""
	epochs     float64 // passes the steps derive from, or 0
}

// finetuneRequest is the finetune.Request the command line asks for:
// req, the settings' flags' values, with the settings given recorded
// (Request.Given), the run's steps and optimizer among them.
func finetuneRequest(flags *pflag.FlagSet, req finetune.Request, ov *overrides) finetune.Request {
	for _, s := range finetune.Settings() {
		if flags.Changed(s.Flag) {
			req.Given(s.Key)
		}
	}
	if ov.isChanged("steps") {
		req.Given("steps")
	}
	if ov.isChanged("optimizer") {
		req.Optimizer = ov.value("optimizer")
	}
	return req
}

// finetuneUsage turns the fine-tune plan's error into a usage error that
// names the flags: a finetune.SettingError's settings, and those its
// reason names, are written as the flags that set them.
func finetuneUsage(flags *pflag.FlagSet, err error) error {
	var se *finetune.SettingError
	if !errors.As(err, &se) {
		return &exitError{code: exitUsage, err: err}
	}
	flag := settingFlag(se.Setting)
	reason := se.Reason.Text(func(key string) string { return "--" + settingFlag(key) })
	if se.Missing {
		switch flag {
		case "from":
			return usageError("finetune needs --from BASE: %s", checkpointPaths)
		case "data":
			return usageError("finetune needs --data FILE.jsonl: the training records")
		}
		return usageError("finetune needs --%s: %s", flag, reason)
	}
	value := se.Value
	if f := flags.Lookup(flag); f != nil && f.Changed && f.Value.Type() != "stringSlice" {
		value = f.Value.String() // as the user wrote it
	} else if f != nil && !f.Changed {
		return usageError("%s", reason) // the run's setting, not the user's: the reason says it
	}
	msg := "invalid --" + flag + " " + value
	if se.With != "" {
		with, rest, _ := strings.Cut(se.With, " ")
		msg += " with --" + settingFlag(with)
		if rest != "" {
			msg += " " + rest
		}
	}
	return usageError("%s: %s", msg, reason)
}

// settingFlag is the flag that sets the setting key: a fine-tune
// setting's (finetune.Settings), or the run's steps or optimizer, whose
// flags are their keys.
func settingFlag(key string) string {
	if s, ok := finetune.LookupSetting(key); ok {
		return s.Flag
	}
	return key
}

func planFinetune(cmd *cobra.Command, opts finetuneOptions, ov *overrides) (finetunePlan, error) {
	flags := cmd.Flags()
	fp, err := finetune.NewPlan(finetuneRequest(flags, opts.req, ov))
	if err != nil {
		return finetunePlan{}, finetuneUsage(flags, err)
	}
	p := finetunePlan{ft: fp.FineTune, checkpoint: fp.Checkpoint, epochs: fp.Epochs}
	switch {
	case opts.out != "":
	case p.checkpoint != "":
		opts.out = runFolderOf(opts.req.Resume, p.checkpoint)
	default:
		opts.out = filepath.Join("runs", "finetune")
	}
	cfg, err := ov.apply(fp.Run)
	if err != nil {
		return p, &exitError{code: exitUsage, err: err}
	}
	if err := fp.CheckRun(cfg); err != nil {
		return p, finetuneUsage(flags, err)
	}
	if cfg.Device, err = pickDevice(ov.value("device"), cfg.Device, "fine-tune"); err != nil {
		return p, err
	}
	resumingHere := p.checkpoint != "" && sameDir(opts.out, runFolderOf(opts.req.Resume, p.checkpoint))
	if err := checkOut(opts.out, resumingHere, opts.overwrite); err != nil {
		return p, err
	}
	p.cfg, p.out = cfg, opts.out
	return p, nil
}

func runFinetune(cmd *cobra.Command, opts finetuneOptions, ov *overrides) error {
	begin := time.Now()
	if err := checkNproc(opts.nproc); err != nil {
		return err
	}
	p, err := planFinetune(cmd, opts, ov)
	if err != nil {
		return err
	}
	if opts.nproc > 1 {
		return launchRanks(cmd.OutOrStdout(), cmd.ErrOrStderr(), opts.nproc, p.cfg.Device)
	}
	group, err := joinGroup()
	if err != nil {
		return err
	}
	out := rankOutput(group, cmd.OutOrStdout())
	p.ft.Tokenizers = openTokenizer
	p.cfg.PlanCache = train.PlanCacheFolder(opts.planCache)
	f, err := finetune.New(p.cfg, p.ft, p.out)
	if err != nil {
		return &exitError{code: exitUsage, err: err}
	}
	f.Group = group
	var notes []string
	if p.epochs > 0 {
		note, err := setEpochSteps(f, p.epochs, ov, group.Size())
		if err != nil {
			return err
		}
		notes = append(notes, note)
	}
	if p.checkpoint == "" && !ov.isChanged("lr") {
		notes = append(notes, fmt.Sprintf("lr %g: the default of %s fine-tunes (adapters %g, full %g), down to %g; --lr sets it",
			f.Config.LR, p.ft.Method, finetune.DefaultAdapterLR, finetune.DefaultFullLR, f.Config.MinLR))
	}
	cfg := f.Config
	label := "finetune " + p.ft.Method
	shown := cfg // the header's context is the rows'
	shown.Model.Context = f.Train.T
	fmt.Fprintln(out, describe(label, shown))
	if group.Size() > 1 {
		fmt.Fprintf(out, "%*s  data-parallel: %d ranks (%s) × %d tokens = %d tokens per update\n",
			len(label), "", group.Size(), group.Backend(), f.TokensPerStep(), f.TokensPerStep()*group.Size())
	}
	for _, n := range notes {
		fmt.Fprintln(out, n)
	}
	fmt.Fprintf(out, "base: %s\n", p.ft.Base)
	if p.ft.Method != finetune.MethodFull {
		fmt.Fprintf(out, "adapters: rank %d, alpha %g, targets %s\n", p.ft.Rank, p.ft.Alpha, strings.Join(p.ft.Targets, ","))
	}
	switch {
	case p.ft.Objective == finetune.GRPOName:
		fmt.Fprintln(out, describeGRPO(p.ft))
		budget := f.Objective.(*finetune.GRPOObjective).Rollout.MaxCompletion
		printPrompts(out, "train", p.ft.Train, f.Train, budget)
		if f.Valid != nil {
			printPrompts(out, "valid", p.ft.Valid, f.Valid, budget)
		}
	case p.ft.Prefers():
		fmt.Fprintln(out, describeObjective(p.ft))
		fallthrough
	default:
		printRows(out, "train", p.ft.Train, f.Train)
		if f.Valid != nil {
			printRows(out, "valid", p.ft.Valid, f.Valid)
		}
	}
	if opts.overwrite && group.Rank() == 0 {
		if err := clearRun(p.out); err != nil {
			return err
		}
	}
	fmt.Fprintf(out, "run folder: %s\n", p.out)

	tail := runTail{out: out, runDir: p.out, begin: begin, plotTitle: fmt.Sprintf("%s · %s params", label, humanCount(cfg.Model.NumParams())),
		noProgress: opts.noProgress, resume: "posttrainllm finetune --resume " + p.out + nprocArg(group),
		diverged: "fine-tuning diverged", hint: "try a lower --lr", heldOut: heldOutChange,
		onStart: func(s train.Start) {
			fmt.Fprintf(out, "trainable: %s of %s params\n", humanCount(s.Params), humanCount(cfg.Model.NumParams()))
		}}
	return tail.run(cmd, cfg, func(ctx context.Context, hooks train.Hooks) (train.Summary, error) {
		f.Hooks = hooks
		return f.Run(ctx, p.checkpoint)
	})
}

// setEpochSteps sets the fine-tune's steps to epochs passes over its
// training sequences (train.EpochSteps), an update taking batch × accum
// of them on each of ranks ranks, shrinking a warm-up the user did not
// set to fit, and returns the header line that says so.
func setEpochSteps(f *finetune.FineTuner, epochs float64, ov *overrides, ranks int) (string, error) {
	steps, err := f.SetEpochs(epochs, ranks, ov.isChanged("warmup"))
	if err != nil {
		return "", usageError("invalid --epochs %g: %v", epochs, err)
	}
	c := f.Config
	perUpdate := fmt.Sprintf("batch %d × accum %d", c.Batch, c.Accum)
	if ranks > 1 {
		perUpdate += fmt.Sprintf(" × %d ranks", ranks)
	}
	return fmt.Sprintf("steps %d: %g epochs of %d sequences, %d per update (%s)",
		steps, epochs, f.Train.Len(), c.Batch*c.Accum*ranks, perUpdate), nil
}

// describeObjective is the header line of a preference fine-tune: the
// objective, its hyperparameters and where its reference comes from.
func describeObjective(ft finetune.Config) string {
	p := ft.Preference()
	line := "objective: " + string(p.Objective)
	switch p.Objective {
	case finetune.DPO, finetune.IPO:
		line += fmt.Sprintf(", beta %g, reference: ", p.Beta)
		if ft.UsesAdapter() {
			line += "the base (adapters off, in the step)"
		} else {
			line += "the base's log-probabilities, computed once (" + finetune.ReferenceFile + ")"
		}
	case finetune.SimPO:
		line += fmt.Sprintf(", beta %g, gamma %g, no reference", p.Beta, p.Gamma)
	case finetune.ORPO:
		line += fmt.Sprintf(", lambda %g, no reference", p.Lambda)
	}
	return line
}

// printRows describes the rows a records file became.
func printRows(w io.Writer, what, path string, r *data.Rows) {
	if r.Pairs {
		fmt.Fprintf(w, "%s: %s: %d preference pairs, rows of %d, %d counted targets", what, path, r.Len()/2, r.T, r.Targets())
		if r.Truncated > 0 {
			fmt.Fprintf(w, ", %d answers cut at the context", r.Truncated)
		}
		if r.NoTargets > 0 {
			fmt.Fprintf(w, ", %d pairs left out (an answer with no counted target within the context)", r.NoTargets)
		}
		fmt.Fprintln(w)
		return
	}
	fmt.Fprintf(w, "%s: %s: %d sequences of %d, %d counted targets", what, path, r.Len(), r.T, r.Targets())
	if r.Truncated > 0 {
		fmt.Fprintf(w, ", %d examples cut at the context", r.Truncated)
	}
	if r.NoTargets > 0 {
		fmt.Fprintf(w, ", %d sequences with no counted target (prompt fills the context)", r.NoTargets)
	}
	fmt.Fprintln(w)
}
