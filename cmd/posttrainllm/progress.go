package main

import (
	"fmt"
	"io"
	"os"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"

	"github.com/posttrainllm/posttrainllm/train"
)

// progress shows a run's advance: a progress bar on a terminal, plain log
// lines otherwise.
type progress struct {
	w      io.Writer
	bar    *progressbar.ProgressBar // nil: plain lines
	useBar bool
	ended  bool // the finished bar's line has been ended
	steps  int
	// load is what the command took before the run started: its
	// corpus or rows, tokenizer and model (Hooks.OnReady's line).
	load time.Duration
}

// newProgress writes to w; it draws a bar only when w is a terminal and
// plain is false.
func newProgress(w io.Writer, plain bool) *progress {
	p := &progress{w: w}
	if f, ok := w.(*os.File); ok && !plain && term.IsTerminal(int(f.Fd())) {
		p.useBar = true
	}
	return p
}

// hooks connects the display to a trainer.
func (p *progress) hooks() train.Hooks {
	return train.Hooks{OnStart: p.start, OnLog: p.log, OnCheckpoint: p.checkpoint, OnReady: p.ready}
}

// ready prints where the run's start went, once its first update is done.
func (p *progress) ready(s train.Startup) {
	p.note("%s", formatStartup(p.load, s))
}

// formatStartup is the start-up line of a run: load (the command's, before
// the run), the run's set-up and plan, its first evaluation and update.
func formatStartup(load time.Duration, s train.Startup) string {
	line := fmt.Sprintf("start-up: load %.1f s, set-up %.1f s", load.Seconds(), s.Open.Seconds())
	switch {
	case s.PlanCached:
		line += " (plan from the plan cache)"
	case s.Probe > 0:
		line += fmt.Sprintf(" (plan probe %.1f s)", s.Probe.Seconds())
	}
	if s.FirstEval > 0 {
		line += fmt.Sprintf(", first evaluation %.1f s", s.FirstEval.Seconds())
	}
	return line + fmt.Sprintf(", first update %.1f s", s.FirstUpdate.Seconds())
}

func (p *progress) start(s train.Start) {
	p.steps = s.Steps
	fmt.Fprintf(p.w, "plan: %s\n", s.Plan)
	if s.Windows != "" {
		fmt.Fprintf(p.w, "windows: %s\n", s.Windows)
	}
	if s.Resumed != "" {
		fmt.Fprintf(p.w, "resuming at step %d of %d from %s\n", s.Step, s.Steps, s.Resumed)
	}
	if !p.useBar {
		return
	}
	p.bar = progressbar.NewOptions(s.Steps,
		progressbar.OptionSetWriter(p.w),
		progressbar.OptionSetDescription("step"),
		progressbar.OptionShowCount(),
		progressbar.OptionSetWidth(24),
		progressbar.OptionSetPredictTime(false),
		progressbar.OptionSetElapsedTime(false),
		progressbar.OptionShowDescriptionAtLineEnd(),
		progressbar.OptionSetRenderBlankState(true),
	)
	p.bar.Set(s.Step)
}

func (p *progress) log(m train.Metrics) {
	line := formatMetrics(m, p.steps)
	if p.bar == nil {
		fmt.Fprintf(p.w, "step %d/%d  %s\n", m.Step, p.steps, line)
		return
	}
	p.bar.Describe(line)
	p.bar.Set(m.Step)
}

func (p *progress) checkpoint(dir string, step int) {
	p.note("checkpoint at step %d: %s", step, dir)
}

// note prints a line without tearing the bar: above a running bar, below a
// finished one.
func (p *progress) note(format string, args ...any) {
	switch {
	case p.bar == nil:
	case p.bar.IsFinished():
		if !p.ended {
			fmt.Fprintln(p.w)
			p.ended = true
		}
	default:
		p.bar.Clear()
		defer p.bar.RenderBlank()
	}
	fmt.Fprintf(p.w, format+"\n", args...)
}

// finish leaves the bar as it stands (full, or where an interrupt stopped
// it) and ends its line.
func (p *progress) finish() {
	if p.bar == nil {
		return
	}
	if !p.bar.IsFinished() {
		p.bar.Exit()
	}
	if !p.ended {
		fmt.Fprintln(p.w)
	}
	p.bar = nil
}

// formatMetrics is one logged step: loss, held-out cross-entropy (and the
// z-loss term apart), learning rate, speed (for a fine-tune also the
// trained tokens per second, padding and masked prompts left out) and the
// time left at that speed.
func formatMetrics(m train.Metrics, steps int) string {
	s := fmt.Sprintf("loss %.4f", m.Loss)
	if m.ValLoss != nil {
		s += fmt.Sprintf("  val %.4f", *m.ValLoss)
		if m.ValZLoss != nil {
			s += fmt.Sprintf(" (+z %.4f)", *m.ValZLoss)
		}
	}
	s += fmt.Sprintf("  lr %.3g  %.2f step/s  %.0f tok/s", m.LR, m.StepsPerS, m.TokensPerS)
	if m.CountedTokensPerS > 0 {
		s += fmt.Sprintf(" (%.0f trained)", m.CountedTokensPerS)
	}
	if m.StepsPerS > 0 && steps > m.Step {
		eta := time.Duration(float64(steps-m.Step) / m.StepsPerS * float64(time.Second))
		s += "  eta " + eta.Round(time.Second).String()
	}
	return s
}
