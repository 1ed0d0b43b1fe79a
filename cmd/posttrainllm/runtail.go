package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"math"
	"path/filepath"
	"slices"
	"time"

	"github.com/spf13/cobra"

	"github.com/posttrainllm/posttrainllm/train"
)

// runTail is what train and finetune share once the run is set up: the
// signals that interrupt it, the progress display, the loss plot, the run
// itself, what a signal or a divergence ends it with, and the summary.
type runTail struct {
	out        io.Writer
	runDir     string
	plotTitle  string
	noProgress bool
	// resume is the command that continues the run after a signal;
	// diverged and hint say what a divergence means and what to try.
	resume, diverged, hint string
	// onStart, when set, prints what the run knows once it has started
	// (before the progress display's own start).
	onStart func(train.Start)
	// heldOut appends the summary's held-out figures to its done: line.
	heldOut func(w io.Writer, sum train.Summary)
	// begin is when the command started: the start-up line reports the
	// load before the run as its first phase.
	begin time.Time
}

// run runs the run (given the context and hooks to run it with) and
// reports it.
func (t runTail) run(cmd *cobra.Command, cfg train.Config, run func(ctx context.Context, hooks train.Hooks) (train.Summary, error)) error {
	ctx, signalled, stopSignals := notifySignals(cmd.ErrOrStderr())
	defer stopSignals()
	prog := newProgress(t.out, t.noProgress)
	// The plot is drawn at checkpoints: a run that fails before its first
	// one leaves the folder as it was.
	plot := &lossPlot{runDir: t.runDir, title: t.plotTitle}
	hooks := prog.hooks()
	if t.onStart != nil {
		start := hooks.OnStart
		hooks.OnStart = func(s train.Start) {
			t.onStart(s)
			start(s)
		}
	}
	prog.load = time.Since(t.begin)
	sum, runErr := run(ctx, plot.hook(hooks))
	plot.wait()
	prog.finish()
	if err := runOutcome(t.out, runErr, signalled, sum, cfg.Steps, t.resume, t.diverged, t.hint); err != nil {
		return err
	}
	w := t.out
	fmt.Fprintf(w, "done: steps %d-%d of %d in %s, loss %.4f -> %.4f", sum.StartStep+1, sum.Step, cfg.Steps,
		sum.Elapsed.Round(1e7), sum.FirstLoss, sum.Loss)
	if t.heldOut != nil {
		t.heldOut(w, sum)
	}
	fmt.Fprintf(w, ", %.0f tokens/s, %d trace(s), peak memory %s\n", sum.TokensPerS, sum.Traces, humanBytes(sum.PeakMemoryBytes))
	fmt.Fprintf(w, "checkpoint: %s\n", sum.LastCheckpoint)
	printBest(w, sum, cfg)
	fmt.Fprintf(w, "metrics:    %s\n", filepath.Join(t.runDir, train.MetricsFile))
	if plot.err != nil {
		return fmt.Errorf("the run finished but its plot failed: %w", plot.err)
	}
	fmt.Fprintf(w, "plot:       %s\n", plot.path)
	return nil
}

// heldOutChange is a fine-tune's held-out figures: the loss and the
// objective's metrics, from the first evaluation to the last.
func heldOutChange(w io.Writer, sum train.Summary) {
	if !math.IsNaN(sum.ValLoss) {
		if !math.IsNaN(sum.InitialValLoss) {
			fmt.Fprintf(w, ", held-out loss %.4f -> %.4f", sum.InitialValLoss, sum.ValLoss)
		} else {
			fmt.Fprintf(w, ", held-out loss %.4f", sum.ValLoss)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(sum.ValAux)) {
		if i, ok := sum.InitialValAux[name]; ok {
			fmt.Fprintf(w, ", held-out %s %.3f -> %.3f", name, i, sum.ValAux[name])
		} else {
			fmt.Fprintf(w, ", held-out %s %.3f", name, sum.ValAux[name])
		}
	}
}

// printBest says where a run kept its best checkpoint (--keep-best) and
// why it stopped early (--patience).
func printBest(w io.Writer, sum train.Summary, cfg train.Config) {
	if sum.EarlyStopped && sum.Best != nil {
		fmt.Fprintf(w, "stopped early at step %d: the held-out loss has not improved for %d evaluations (best %.4f at step %d)\n",
			sum.Step, cfg.Patience, sum.Best.ValLoss, sum.Best.Step)
	}
	if sum.Best != nil && sum.Best.Checkpoint != "" {
		fmt.Fprintf(w, "best:       %s (held-out loss %.4f at step %d)\n", sum.Best.Checkpoint, sum.Best.ValLoss, sum.Best.Step)
	}
}
