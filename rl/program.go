package rl

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Program is a reward computed by an external program (the
// --reward-cmd flag), so that a scorer in Python, a shell script or any
// language plugs in. Each Score call runs argv once, in its own process
// group, and writes one JSON object per item to its stdin:
//
//	{"prompt": "…" or null, "messages": [{"role", "content"}…] or null,
//	 "completion": "…", "tokens": 12, "truncated": false,
//	 …every other field of the prompt's record, e.g. "answer": "42"}
//
// (the completion's keys take precedence over record fields of the same
// name). The program must write exactly one number per line to stdout,
// in the items' order, and exit 0. A non-zero exit (reported with the
// tail of its stderr), a wrong number of lines, a line that is not a
// finite number, or a run longer than timeout (the process group is
// killed) is an error, never a hang. timeout must be positive.
func Program(name string, argv []string, timeout time.Duration) Scorer {
	return programScorer{name: name, argv: argv, timeout: timeout}
}

// programScorer is the Scorer Program makes.
type programScorer struct {
	name    string
	argv    []string
	timeout time.Duration
}

// stderrTail is how much of a failed program's stderr its error shows.
const stderrTail = 2 << 10

// waitDelay bounds the wait for a killed program's pipes, which a
// grandchild outside its process group could hold open.
const waitDelay = 2 * time.Second

// Name names the reward.
func (s programScorer) Name() string { return s.name }

// Score runs the program on the items.
func (s programScorer) Score(ctx context.Context, items []Item) ([]float64, error) {
	if len(s.argv) == 0 || s.argv[0] == "" {
		return nil, failure(s.name, -1, errors.New("no program to run; want a command line"))
	}
	if s.timeout <= 0 {
		return nil, failure(s.name, -1, fmt.Errorf("timeout %v, want > 0", s.timeout))
	}
	if len(items) == 0 {
		return []float64{}, nil
	}
	input, err := programInput(items)
	if err != nil {
		return nil, failure(s.name, -1, err)
	}
	tctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	cmd := exec.CommandContext(tctx, s.argv[0], s.argv[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = waitDelay
	cmd.Stdin = bytes.NewReader(input)
	var stdout bytes.Buffer
	stderr := &tailWriter{max: stderrTail}
	cmd.Stdout, cmd.Stderr = &stdout, stderr
	prog := strconv.Quote(strings.Join(s.argv, " "))
	if err := cmd.Run(); err != nil {
		var exit *exec.ExitError
		switch {
		case ctx.Err() != nil:
			return nil, failure(s.name, -1, fmt.Errorf("program %s stopped: %w", prog, ctx.Err()))
		case tctx.Err() != nil:
			return nil, failure(s.name, -1, fmt.Errorf("program %s hung for its timeout of %v and was killed", prog, s.timeout))
		case errors.As(err, &exit):
			return nil, failure(s.name, -1, fmt.Errorf("program %s failed (%v); stderr: %s", prog, exit.ProcessState, stderr.text()))
		}
		return nil, failure(s.name, -1, fmt.Errorf("program %s: %w", prog, err))
	}
	scores, err := parseScores(stdout.String(), len(items))
	if err != nil {
		return nil, failure(s.name, -1, fmt.Errorf("program %s: %w", prog, err))
	}
	return scores, nil
}

// programInput encodes the items as a reward program reads them: one
// JSON object per line.
func programInput(items []Item) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	for i, it := range items {
		obj := make(map[string]any, len(it.Prompt.Fields)+5)
		maps.Copy(obj, it.Prompt.Fields)
		obj["prompt"], obj["messages"] = nil, nil
		if it.Prompt.Messages != nil {
			obj["messages"] = it.Prompt.Messages
		} else {
			obj["prompt"] = it.Prompt.Text
		}
		obj["completion"] = it.Completion.Text
		obj["tokens"] = it.Completion.Tokens
		obj["truncated"] = it.Completion.Truncated
		if err := enc.Encode(obj); err != nil {
			return nil, fmt.Errorf("item %d: encoding for the program: %w", i, err)
		}
	}
	return buf.Bytes(), nil
}

// parseScores reads a program's stdout: exactly n lines, each a finite
// number.
func parseScores(out string, n int) ([]float64, error) {
	out = strings.TrimSuffix(out, "\n")
	var lines []string
	if out != "" {
		lines = strings.Split(out, "\n")
	}
	if len(lines) != n {
		return nil, fmt.Errorf("wrote %d lines for %d completions; want one number per line", len(lines), n)
	}
	scores := make([]float64, n)
	for i, l := range lines {
		l = strings.TrimSpace(l)
		v, err := strconv.ParseFloat(l, 64)
		if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
			if len(l) > 60 {
				l = l[:60] + "…"
			}
			return nil, fmt.Errorf("line %d of its output is %q, want a finite number", i+1, l)
		}
		scores[i] = v
	}
	return scores, nil
}

// tailWriter keeps the last max bytes written to it.
type tailWriter struct {
	max  int
	buf  []byte
	lost bool
}

// Write keeps the tail of p.
func (w *tailWriter) Write(p []byte) (int, error) {
	w.buf = append(w.buf, p...)
	if over := len(w.buf) - w.max; over > 0 {
		w.buf = append(w.buf[:0], w.buf[over:]...)
		w.lost = true
	}
	return len(p), nil
}

// text is the kept tail, trimmed, marked when its start was cut.
func (w *tailWriter) text() string {
	s := strings.TrimSpace(string(w.buf))
	switch {
	case s == "":
		return "(empty)"
	case w.lost:
		return "…" + s
	}
	return s
}
