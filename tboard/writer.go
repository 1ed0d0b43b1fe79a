package tboard

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/posttrainllm/posttrainllm/tboard/tbpb"
)

// FileVersion is the file_version of an event file's first event, the
// format TensorBoard's reader expects.
const FileVersion = "brain.Event:2"

// Scalar is one named value of a step.
type Scalar struct {
	Tag   string
	Value float64
}

// Writer appends events to one new event file in a log directory. It is
// not safe for concurrent use.
type Writer struct {
	f    *os.File
	path string
	// Now is the clock events are stamped with (wall_time); tests may
	// replace it.
	Now func() time.Time
}

// fileSeq tells apart files one process creates within a second.
var fileSeq atomic.Int64

// Create makes dir if needed and starts a new event file in it, named as
// TensorBoard's own writers name theirs
// (events.out.tfevents.TIME.HOST.PID.N), beginning with the file-version
// event. Files already in dir are left alone: TensorBoard reads every
// event file of a directory in name order.
func Create(dir string) (*Writer, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("tboard: %w", err)
	}
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "localhost"
	}
	now := time.Now()
	name := fmt.Sprintf("events.out.tfevents.%010d.%s.%d.%d", now.Unix(), host, os.Getpid(), fileSeq.Add(1))
	path := filepath.Join(dir, name)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return nil, fmt.Errorf("tboard: %w", err)
	}
	w := &Writer{f: f, path: path, Now: time.Now}
	if err := w.write(&tbpb.Event{What: &tbpb.Event_FileVersion{FileVersion: FileVersion}}); err != nil {
		f.Close()
		os.Remove(path)
		return nil, err
	}
	return w, nil
}

// Path is the event file's path.
func (w *Writer) Path() string { return w.path }

// Scalars writes the values of one step as one event. A NaN or infinite
// value is written as it is: TensorBoard shows it as such.
func (w *Writer) Scalars(step int64, values []Scalar) error {
	if len(values) == 0 {
		return nil
	}
	sum := &tbpb.Summary{Value: make([]*tbpb.Summary_Value, len(values))}
	for i, v := range values {
		if v.Tag == "" {
			return errors.New("tboard: a scalar without a tag")
		}
		sum.Value[i] = &tbpb.Summary_Value{Tag: v.Tag,
			Value: &tbpb.Summary_Value_SimpleValue{SimpleValue: float32(v.Value)}}
	}
	return w.write(&tbpb.Event{Step: step, What: &tbpb.Event_Summary{Summary: sum}})
}

// Text writes text (Markdown, as TensorBoard's text dashboard renders it)
// under tag at step, as the text plugin's summaries are written: a scalar
// string tensor.
func (w *Writer) Text(step int64, tag, text string) error {
	v := &tbpb.Summary_Value{
		Tag:      tag,
		Metadata: &tbpb.SummaryMetadata{PluginData: &tbpb.SummaryMetadata_PluginData{PluginName: "text"}},
		Value: &tbpb.Summary_Value_Tensor{Tensor: &tbpb.TensorProto{
			Dtype:       tbpb.DataType_DT_STRING,
			TensorShape: &tbpb.TensorShapeProto{},
			StringVal:   [][]byte{[]byte(text)},
		}},
	}
	sum := &tbpb.Summary{Value: []*tbpb.Summary_Value{v}}
	return w.write(&tbpb.Event{Step: step, What: &tbpb.Event_Summary{Summary: sum}})
}

// Restart marks that the run starts over at step (a run resumed from a
// checkpoint): TensorBoard's reader then drops what earlier files of the
// directory hold for step and later, written after that checkpoint by a
// run that did not reach its next one.
func (w *Writer) Restart(step int64) error {
	return w.write(&tbpb.Event{Step: step,
		What: &tbpb.Event_SessionLog{SessionLog: &tbpb.SessionLog{Status: tbpb.SessionLog_START}}})
}

// write stamps ev with the wall time and appends it as one record.
func (w *Writer) write(ev *tbpb.Event) error {
	if w.f == nil {
		return errors.New("tboard: write to a closed writer")
	}
	now := w.Now()
	ev.WallTime = float64(now.Unix()) + float64(now.Nanosecond())/1e9
	b, err := proto.Marshal(ev)
	if err != nil {
		return fmt.Errorf("tboard: %w", err)
	}
	if err := WriteRecord(w.f, b); err != nil {
		return fmt.Errorf("tboard: %s: %w", w.path, err)
	}
	return nil
}

// Close closes the event file. Closing twice is a no-op.
func (w *Writer) Close() error {
	if w == nil || w.f == nil {
		return nil
	}
	err := w.f.Close()
	w.f = nil
	if err != nil {
		return fmt.Errorf("tboard: %w", err)
	}
	return nil
}
