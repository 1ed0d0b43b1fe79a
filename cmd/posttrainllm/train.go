package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/posttrainllm/posttrainllm/checkpoint"
	"github.com/posttrainllm/posttrainllm/data"
	"github.com/posttrainllm/posttrainllm/presets"
	"github.com/posttrainllm/posttrainllm/pretrain"
	"github.com/posttrainllm/posttrainllm/train"
)

// trainOptions are the train command's own flags (besides config flags).
type trainOptions struct {
	preset     string
	out        string
	resume     string
	overwrite  bool
	noProgress bool
	tokenCache string
	planCache  string
	nproc      int
}

func newTrainCmd() *cobra.Command {
	var opts trainOptions
	cmd := &cobra.Command{
		Use:   "train",
		Short: "Train a model from a preset, or resume a run",
		Long: `train runs a preset (default tiny), with any preset field overridden by a
flag, and writes into the run folder --out: metrics.jsonl (one JSON line per
logged step; loss is the mean over the updates since the previous line),
tb/ (the same as TensorBoard event files: tensorboard --logdir runs),
checkpoints/step-NNNNNNNN/ (model.safetensors, optimizer.safetensors,
state.json) and loss.png, drawn at every checkpoint.

Without --corpus it trains on the Go standard library sources under GOROOT.
--lr moves min_lr with it (the preset's ratio) unless --min-lr is given;
--tokenizer sets --vocab to its vocabulary unless --vocab is given.
--resume continues a run from a checkpoint with the checkpoint's settings;
--steps may extend it, and the flags that started the run (--preset
included) may be repeated, but a setting that differs from the run's
model, optimizer or tokenizer, or a preset that is not the run's, is
refused. An existing run folder is never replaced unless --overwrite says
so.

` + checkpointRule("--resume") + `

--batch × --accum sequences make one optimizer update. --micro-batch sets
how many of them one forward pass runs, the plan: auto (the default) runs
the batch as given on the CPU and, on a GPU, the largest divisor of batch ×
accum whose step, run once per candidate on throwaway parameters, peaks
within --memory-budget; a number forces it. Every plan computes the same
update, and a resumed run may use another. The plan is printed as the run
starts and logged in metrics.jsonl.

Flags without a default below take the preset's value (or the
checkpoint's); only the flags given override it.

Ctrl-C (SIGINT) or SIGTERM finishes the step in flight, writes a checkpoint
and exits with status 130 or 143; resume with --resume. A second signal
quits at once.

` + nprocHelp + `

--resume continues every rank's stream from the checkpoint; pass --nproc
again.`,
		Example: `  posttrainllm train --preset tiny --steps 200 --corpus input.txt --out runs/tiny
  posttrainllm train --resume runs/tiny --steps 400
  posttrainllm train --preset small --lr 1e-3 --schedule wsd --decay-fraction 0.2 --out runs/small
  posttrainllm train --preset huge --batch 8 --out runs/huge
  posttrainllm train --preset tiny --out runs/tiny --overwrite --no-progress
  posttrainllm train --preset huge --device gpu --nproc 2 --out runs/huge-dp`,
		Args: cobra.NoArgs,
	}
	fs := cmd.Flags()
	fs.StringVar(&opts.preset, "preset", "tiny", "preset to start from (see posttrainllm presets)")
	fs.StringVar(&opts.out, "out", "", "run folder (default runs/PRESET, or the resumed run's folder)")
	fs.StringVar(&opts.resume, "resume", "", "continue from this run folder (its newest checkpoint) or checkpoint directory")
	fs.BoolVar(&opts.overwrite, "overwrite", false, "replace the run in --out (its checkpoints, metrics and plot)")
	fs.BoolVar(&opts.noProgress, "no-progress", false, "plain log lines instead of a progress bar")
	fs.StringVar(&opts.tokenCache, "token-cache", "", "directory of cached token files (default $XDG_CACHE_HOME/posttrainllm/tokens)")
	fs.StringVar(&opts.planCache, "plan-cache", "", "folder of probed micro-batch plans kept for later runs (default $XDG_CACHE_HOME/posttrainllm/plans; off probes every time)")
	fs.IntVar(&opts.nproc, "nproc", 1, "data-parallel ranks to start on this machine (see below)")
	ov := addConfigFlags(fs)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		return runTrain(cmd, opts, ov)
	}
	return cmd
}

// trainPlan is a validated train command: nothing has been written yet.
type trainPlan struct {
	cfg        train.Config
	label      string // preset name or "resumed"
	out        string
	checkpoint string // checkpoint directory to resume from, or ""
	resumeStep int
	notes      []string // settings changed to fit the run, for its header
}

// planTrain resolves the preset or checkpoint, applies the flags and checks
// everything that can be checked before writing anything.
func planTrain(cmd *cobra.Command, opts trainOptions, ov *overrides) (trainPlan, error) {
	flags := cmd.Flags()
	var p trainPlan
	var base train.Config
	if opts.resume != "" {
		if opts.overwrite && (opts.out == "" || filepath.Clean(opts.out) == filepath.Clean(opts.resume)) {
			return p, usageError("--overwrite with --resume %s: resuming continues that run; drop --overwrite", opts.resume)
		}
		dir, err := checkpoint.Resolve(opts.resume)
		if err != nil {
			return p, usageError("invalid --resume %s: %v", opts.resume, err)
		}
		st, err := train.ReadRunState(filepath.Join(dir, checkpoint.StateFile))
		if err != nil {
			return p, usageError("invalid --resume %s: %v", opts.resume, err)
		}
		if err := st.Config.Validate(); err != nil {
			return p, usageError("invalid --resume %s: the checkpoint's settings do not validate: %v", opts.resume, err)
		}
		base, p.checkpoint, p.resumeStep, p.label = st.Config, dir, st.Step, "resumed"
		if opts.out == "" {
			opts.out = runFolderOf(opts.resume, dir)
		}
	} else {
		cfg, err := presets.Load(opts.preset)
		if err != nil {
			return p, usageError("invalid --preset %s: want one of %s", opts.preset, strings.Join(presets.Names(), ", "))
		}
		base, p.label = cfg, opts.preset
		if opts.out == "" {
			opts.out = filepath.Join("runs", opts.preset)
		}
	}
	if err := resolveCorpus(ov); err != nil {
		return p, err
	}
	cfg, err := ov.apply(base)
	if err != nil {
		return p, &exitError{code: exitUsage, err: err}
	}
	if cfg.Warmup != base.Warmup && !ov.isChanged("warmup") {
		p.notes = append(p.notes, fmt.Sprintf("warmup %d (the %s's %d warm-up steps do not fit %d steps; --warmup sets it)",
			cfg.Warmup, settingsOf(p.label), base.Warmup, cfg.Steps))
	}
	if p.checkpoint != "" {
		if err := checkResumable(ov, base, cfg, p); err != nil {
			return p, err
		}
		if flags.Changed("preset") {
			if err := checkPresetOfRun(ov, opts.preset, opts.resume, cfg); err != nil {
				return p, err
			}
		}
	}
	if cfg.Device, err = pickDevice(ov.value("device"), cfg.Device, p.label); err != nil {
		return p, err
	}
	if err := cfg.CheckMemory(); err != nil {
		return p, &exitError{code: exitUsage, err: err}
	}
	resumingHere := p.checkpoint != "" && sameDir(opts.out, runFolderOf(opts.resume, p.checkpoint))
	if err := checkOut(opts.out, resumingHere, opts.overwrite); err != nil {
		return p, err
	}
	p.cfg, p.out = cfg, opts.out
	return p, nil
}

// resolveCorpus checks that --corpus exists and makes it absolute, so a
// checkpoint's config names it from any working directory.
func resolveCorpus(ov *overrides) error {
	if err := resolveShards(ov); err != nil {
		return err
	}
	if !ov.isChanged("corpus") {
		return nil
	}
	c := ov.value("corpus")
	if _, err := os.Stat(c); err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return usageError("invalid --corpus %s: %v", c, err)
	}
	abs, err := filepath.Abs(c)
	if err != nil {
		return usageError("invalid --corpus %s: %v", c, err)
	}
	return ov.fs.Set("corpus", abs)
}

// checkResumable refuses flags that a checkpoint cannot continue with.
func checkResumable(ov *overrides, base, cfg train.Config, p trainPlan) error {
	for _, f := range ov.changed() {
		if f.get(base) == f.get(cfg) {
			continue
		}
		switch {
		case f.model:
			return usageError("invalid --%s %s: %s is a checkpoint of another model shape (%s %s); a resumed run keeps its model",
				f.name, ov.value(f.name), p.checkpoint, f.field, f.get(base))
		case f.name == "optimizer":
			return usageError("invalid --optimizer %s: %s holds %s optimizer state; a resumed run keeps its optimizer",
				ov.value(f.name), p.checkpoint, base.Optimizer)
		case f.name == "galore-rank" && base.Optimizer == "galore":
			return usageError("invalid --galore-rank %s: %s holds GaLore state of the run's own rank; a resumed run keeps it",
				ov.value(f.name), p.checkpoint)
		case f.name == "tokenizer":
			return usageError("invalid --tokenizer %s: %s was trained on %s tokens; a resumed run keeps its tokenizer",
				ov.value(f.name), p.checkpoint, base.Tokenizer)
		}
	}
	if cfg.Steps <= p.resumeStep {
		return usageError("nothing to do: %s is at step %d and the run has %d steps; pass --steps N with N > %d to continue",
			p.checkpoint, p.resumeStep, cfg.Steps, p.resumeStep)
	}
	return nil
}

// checkPresetOfRun accepts --preset beside --resume when the preset, with
// the same flags applied, gives the run's own settings: the command line
// that started a run, with --resume added, continues it. Otherwise it names
// the first setting that differs. The device is left out: the run's is
// the one auto chose. run is the checkpoint's config with the flags
// applied. A warm-up the preset had shrunk to fit a first --steps shorter
// than it (train.Config.FitWarmup: half those steps) counts as the preset's.
func checkPresetOfRun(ov *overrides, preset, resume string, run train.Config) error {
	pc, err := presets.Load(preset)
	if err != nil {
		return usageError("invalid --preset %s: want one of %s", preset, strings.Join(presets.Names(), ", "))
	}
	withFlags, err := ov.apply(pc)
	if err != nil {
		return usageError("invalid --preset %s with --resume %s: %v", preset, resume, err)
	}
	if !ov.isChanged("warmup") && pc.Schedule != "constant" && run.Warmup <= pc.Warmup/2 {
		withFlags.Warmup = run.Warmup // what FitWarmup made of it for a run of up to pc.Warmup steps
	}
	for _, f := range ov.flags {
		if f.name == "device" {
			continue
		}
		if a, b := f.get(withFlags), f.get(run); a != b {
			return usageError("invalid --preset %s with --resume %s: the preset's %s is %s, the run's %s (--%s); drop --preset to continue the run with its own settings",
				preset, resume, f.field, a, b, f.name)
		}
	}
	withFlags.Device = run.Device
	if field := train.FirstDifference(withFlags, run); field != "" {
		return usageError("invalid --preset %s with --resume %s: the preset's %s differs from the run's; drop --preset to continue the run with its own settings",
			preset, resume, field)
	}
	return nil
}

// settingsOf names where a run's settings come from: its preset or the
// checkpoint it resumes.
func settingsOf(label string) string {
	if label == "resumed" {
		return "checkpoint"
	}
	return "preset " + label
}

func sameDir(a, b string) bool {
	aa, err1 := filepath.Abs(a)
	bb, err2 := filepath.Abs(b)
	return err1 == nil && err2 == nil && aa == bb
}

func runTrain(cmd *cobra.Command, opts trainOptions, ov *overrides) error {
	begin := time.Now()
	if err := checkNproc(opts.nproc); err != nil {
		return err
	}
	p, err := planTrain(cmd, opts, ov)
	if err != nil {
		return err
	}
	cfg := p.cfg
	cfg.PlanCache = train.PlanCacheFolder(opts.planCache)
	if opts.nproc > 1 {
		return launchRanks(cmd.OutOrStdout(), cmd.ErrOrStderr(), opts.nproc, cfg.Device)
	}
	group, err := joinGroup()
	if err != nil {
		return err
	}
	out := rankOutput(group, cmd.OutOrStdout())

	fmt.Fprintln(out, describe(p.label, cfg))
	if group.Size() > 1 {
		fmt.Fprintf(out, "%*s  data-parallel: %d ranks (%s) × %d tokens = %d tokens per update\n",
			len(p.label), "", group.Size(), group.Backend(), cfg.TokensPerStep(), cfg.TokensPerStep()*group.Size())
	}
	for _, n := range p.notes {
		fmt.Fprintln(out, n)
	}
	if cfg.EvalEvery > 0 {
		fmt.Fprintf(out, "%*s  held-out loss every %d steps on %d tokens (%d batches of %d windows of %d tokens)\n",
			len(p.label), "", cfg.EvalEvery, cfg.EvalTokensCovered(), cfg.EvalBatches(), cfg.Batch, cfg.Model.Context)
	}
	tokDir := p.out
	if p.checkpoint != "" {
		tokDir = checkpoint.RunDirOf(p.checkpoint)
	}
	ds, err := openDataset(out, cfg, opts.tokenCache, tokDir)
	if err != nil {
		return err
	}
	defer ds.Close()
	tr, err := pretrain.New(cfg, ds, p.out)
	if err != nil {
		return &exitError{code: exitUsage, err: err}
	}
	tr.Group = group
	if opts.overwrite && group.Rank() == 0 {
		if err := clearRun(p.out); err != nil {
			return err
		}
	}
	fmt.Fprintf(out, "run folder: %s\n", p.out)

	tail := runTail{out: out, runDir: p.out, begin: begin, noProgress: opts.noProgress,
		plotTitle: fmt.Sprintf("%s · %s params · %d tokens/step", p.label, humanCount(cfg.Model.NumParams()), cfg.TokensPerStep()*group.Size()),
		resume:    fmt.Sprintf("posttrainllm train --resume %s%s", p.out, nprocArg(group)),
		diverged:  "training diverged", hint: "try a lower --lr or --grad-clip 1",
		heldOut: func(w io.Writer, sum train.Summary) {
			if !math.IsNaN(sum.ValLoss) {
				fmt.Fprintf(w, ", held-out loss %.4f (%d tokens)", sum.ValLoss, cfg.EvalTokensCovered())
			}
		}}
	return tail.run(cmd, cfg, func(ctx context.Context, hooks train.Hooks) (train.Summary, error) {
		tr.Hooks = hooks
		return tr.Run(ctx, p.checkpoint)
	})
}

// runOutcome turns the error a run ended with into the command's: after a
// signal it says where the checkpoint is and how to continue (resume, a
// command line) and exits with the signal's code; a run that diverged gets
// what, with a hint; any other error is returned as it is; nil is nil.
func runOutcome(out io.Writer, runErr error, signalled <-chan syscall.Signal, sum train.Summary, steps int,
	resume, diverged, hint string) error {
	switch {
	case errors.Is(runErr, train.ErrInterrupted):
		sig := <-signalled
		fmt.Fprintf(out, "%s: stopped at step %d of %d; checkpoint %s\ncontinue with: %s\n",
			signalName(sig), sum.Step, steps, sum.LastCheckpoint, resume)
		code := exitSIGTERM
		if sig == syscall.SIGINT {
			code = exitSIGINT
		}
		return &exitError{code: code}
	case errors.Is(runErr, train.ErrNonFinite):
		return fmt.Errorf("%s: %w; %s", diverged, runErr, hint)
	}
	return runErr
}

// notifySignals returns a context that SIGINT or SIGTERM cancels (through
// signal.NotifyContext) and a channel that then yields the signal. After
// the first signal the default action returns, so a second one ends the
// process without waiting for a long step. stop releases the handlers.
func notifySignals(w io.Writer) (ctx context.Context, signalled <-chan syscall.Signal, stop func()) {
	ctxInt, stopInt := signal.NotifyContext(context.Background(), syscall.SIGINT)
	ctx, stopTerm := signal.NotifyContext(ctxInt, syscall.SIGTERM)
	sigs := make(chan syscall.Signal, 1)
	done := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
		case <-done:
			return
		}
		if context.Cause(ctx) == context.Canceled {
			return // released by stop, no signal
		}
		sig := syscall.SIGTERM
		if ctxInt.Err() != nil {
			sig = syscall.SIGINT
		}
		sigs <- sig
		stopTerm()
		stopInt()
		fmt.Fprintln(w, "posttrainllm: stopping after the step in flight and writing a checkpoint; signal again to quit at once")
	}()
	return ctx, sigs, func() {
		close(done)
		stopTerm()
		stopInt()
	}
}

func signalName(sig syscall.Signal) string {
	if sig == syscall.SIGINT {
		return "SIGINT"
	}
	return "SIGTERM"
}

// openDataset loads and tokenises the corpus, saying which one is used;
// runDir is the run folder whose tokenizer files an hf tokenizer reads.
func openDataset(w io.Writer, cfg train.Config, cacheDir, runDir string) (*pretrain.Dataset, error) {
	tok, err := runTokenizer(cfg, runDir)
	if err != nil {
		return nil, err
	}
	if cfg.Data != "" {
		return openShardDataset(w, cfg, tok)
	}
	name := cfg.Corpus
	if name == "" {
		dir, err := data.DefaultCorpus()
		if err != nil {
			return nil, err
		}
		name = fmt.Sprintf("%s (default: the Go standard library sources, first %d MiB of non-test .go files)",
			dir, data.DefaultCorpusMaxBytes>>20)
	}
	fmt.Fprintf(w, "corpus: %s\n", name)
	ds, err := pretrain.OpenDatasetWith(cfg.Corpus, tok, cacheDir, cfg.Model.Context, cfg.ValFraction)
	if err != nil {
		return nil, fmt.Errorf("corpus %s: %w", name, err)
	}
	fmt.Fprintf(w, "tokens: %d for training, %d held out (%s tokenizer)\n", ds.Train.Len(), ds.Val.Len(), tok.Name())
	return ds, nil
}

// humanBytes writes n in KiB, MiB or GiB.
func humanBytes(n uint64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
