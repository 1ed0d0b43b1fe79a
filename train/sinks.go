package train

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/posttrainllm/posttrainllm/tboard"
)

// MetricsSink receives every metrics line a run logs. A run writes each
// line to two sinks, metrics.jsonl and the TensorBoard event files of its
// tb folder, from the same Metrics value, so a field added to Metrics
// reaches both.
type MetricsSink interface {
	Log(Metrics) error
	Close() error
}

// TensorBoardDir is the folder of a run's TensorBoard event files:
// `tensorboard --logdir RUN` (or a folder of runs) shows them.
const TensorBoardDir = "tb"

// Setting is a run's settings as a document (a Config, a finetune.Config)
// that the TensorBoard sink writes as text when a run starts.
type Setting struct {
	Tag   string
	Value any
}

// sinks is every sink of a run; Log and Close reach each.
type sinks []MetricsSink

// Log writes m to every sink and returns the first error.
func (s sinks) Log(m Metrics) error {
	var first error
	for _, k := range s {
		if err := k.Log(m); err != nil && first == nil {
			first = fmt.Errorf("metrics: %w", err)
		}
	}
	return first
}

// Close closes every sink and returns the first error.
func (s sinks) Close() error {
	var first error
	for _, k := range s {
		if err := k.Close(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// openSinks opens the metrics sinks of the run folder dir for a run that
// starts at step (resuming: continuing a checkpoint at that step): its
// metrics.jsonl and a new event file in dir/tb, which begins with the
// settings as text.
func openSinks(dir string, step int, resuming bool, settings ...Setting) (sinks, error) {
	f, err := openMetrics(filepath.Join(dir, MetricsFile), step, resuming)
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	out := sinks{&jsonlSink{f}}
	tb, err := openTensorBoard(filepath.Join(dir, TensorBoardDir), step, resuming, settings)
	if err != nil {
		out.Close()
		return nil, fmt.Errorf("metrics: %w", err)
	}
	return append(out, tb), nil
}

// jsonlSink writes metrics.jsonl: one JSON object a line.
type jsonlSink struct{ f *os.File }

func (s *jsonlSink) Log(m Metrics) error {
	js, err := json.Marshal(metricsForJSON(m))
	if err != nil {
		return err
	}
	_, err = s.f.Write(append(js, '\n'))
	return err
}

func (s *jsonlSink) Close() error { return s.f.Close() }

// openMetrics opens the metrics log for appending. When resuming at step,
// lines logged after it (by a run that crashed before its next checkpoint)
// are dropped so every step appears once.
func openMetrics(path string, resumeStep int, resuming bool) (*os.File, error) {
	if !resuming {
		return os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	}
	old, err := ReadMetrics(path)
	if err != nil && !os.IsNotExist(err) {
		return nil, err
	}
	var buf bytes.Buffer
	for _, m := range old {
		if m.Step <= resumeStep {
			js, _ := json.Marshal(m)
			buf.Write(append(js, '\n'))
		}
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		return nil, err
	}
	return os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0o644)
}

// tbSink writes each line's values as TensorBoard scalars named as in
// metrics.jsonl, against the line's step.
type tbSink struct{ w *tboard.Writer }

// openTensorBoard starts a new event file in dir. A fresh run first
// removes the event files an earlier run left there (as it truncates
// metrics.jsonl); a resumed one marks the restart, so TensorBoard drops
// what earlier files hold after the checkpoint's step, as metrics.jsonl
// drops those lines.
func openTensorBoard(dir string, step int, resuming bool, settings []Setting) (*tbSink, error) {
	if !resuming {
		old, _ := filepath.Glob(filepath.Join(dir, "events.out.tfevents.*"))
		for _, f := range old {
			if err := os.Remove(f); err != nil {
				return nil, fmt.Errorf("removing an earlier run's event file: %w", err)
			}
		}
	}
	w, err := tboard.Create(dir)
	if err != nil {
		return nil, err
	}
	s := &tbSink{w}
	if err := s.start(step, resuming, settings); err != nil {
		w.Close()
		return nil, err
	}
	return s, nil
}

// start writes the restart mark and the settings.
func (s *tbSink) start(step int, resuming bool, settings []Setting) error {
	if resuming {
		if err := s.w.Restart(int64(step) + 1); err != nil {
			return err
		}
	}
	for _, st := range settings {
		js, err := json.MarshalIndent(st.Value, "", "  ")
		if err != nil {
			return fmt.Errorf("settings %s: %w", st.Tag, err)
		}
		// Indented four spaces: a code block in TensorBoard's Markdown.
		text := "    " + strings.ReplaceAll(string(js), "\n", "\n    ")
		if err := s.w.Text(int64(step), st.Tag, text); err != nil {
			return err
		}
	}
	return nil
}

func (s *tbSink) Log(m Metrics) error {
	vals, err := MetricValues(m)
	if err != nil {
		return err
	}
	names := make([]string, 0, len(vals))
	for k := range vals {
		names = append(names, k)
	}
	slices.Sort(names)
	scalars := make([]tboard.Scalar, len(names))
	for i, k := range names {
		scalars[i] = tboard.Scalar{Tag: k, Value: vals[k]}
	}
	return s.w.Scalars(int64(m.Step), scalars)
}

func (s *tbSink) Close() error { return s.w.Close() }

// MetricValues are the measured values of a metrics line by their
// metrics.jsonl names, as the TensorBoard sink writes them: every number
// of the JSON line but the step, the fields of an object (an objective's
// auxiliary metrics) named object_field (val_aux_accuracy). A line without a training loss (the
// held-out evaluation of a fresh run's step 0) measured only the
// learning rate and its val_ fields; the zeros JSON holds for the rest
// are left out.
func MetricValues(m Metrics) (map[string]float64, error) {
	js, err := json.Marshal(metricsForJSON(m))
	if err != nil {
		return nil, err
	}
	var all map[string]any
	if err := json.Unmarshal(js, &all); err != nil {
		return nil, err
	}
	evalOnly := math.IsNaN(m.Loss)
	out := make(map[string]float64, len(all))
	for k, v := range all {
		if group, ok := v.(map[string]any); ok { // aux, val_aux: their fields as k_field
			delete(all, k)
			for sub, sv := range group {
				all[k+"_"+sub] = sv
			}
		}
	}
	for k, v := range all {
		f, ok := v.(float64)
		switch {
		case !ok:
			return nil, errors.New("metrics: field " + k + " is not a number")
		case k == "step", evalOnly && k != "lr" && !strings.HasPrefix(k, "val_"):
			continue
		}
		out[k] = f
	}
	return out, nil
}

// metricsForJSON replaces a NaN loss (not measured) by zero so the JSON
// line stays valid; the step-0 line carries only val_loss.
func metricsForJSON(m Metrics) Metrics {
	if math.IsNaN(m.Loss) {
		m.Loss = 0
	}
	return m
}
