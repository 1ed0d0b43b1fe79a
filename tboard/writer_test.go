package tboard

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/posttrainllm/posttrainllm/tboard/tbpb"
)

// readEvents reads every event of an event file.
func readEvents(t *testing.T, path string) []*tbpb.Event {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	r := bytes.NewReader(b)
	var out []*tbpb.Event
	for {
		rec, err := ReadRecord(r)
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		ev := new(tbpb.Event)
		if err := proto.Unmarshal(rec, ev); err != nil {
			t.Fatal(err)
		}
		out = append(out, ev)
	}
}

// A file holds the version event, then each call's event with its step,
// wall time and values.
func TestWriterEvents(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tb")
	w, err := Create(dir)
	if err != nil {
		t.Fatal(err)
	}
	at := time.Unix(1700000000, 250e6)
	w.Now = func() time.Time { return at }
	if err := w.Scalars(10, []Scalar{{"loss", 2.25}, {"lr", 1e-3}}); err != nil {
		t.Fatal(err)
	}
	if err := w.Text(10, "config", "    {\"lr\": 0.001}"); err != nil {
		t.Fatal(err)
	}
	if err := w.Restart(11); err != nil {
		t.Fatal(err)
	}
	if err := w.Scalars(20, []Scalar{{"", 1}}); err == nil {
		t.Fatal("a scalar without a tag was written")
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := w.Scalars(30, []Scalar{{"loss", 1}}); err == nil {
		t.Fatal("a closed writer wrote")
	}
	if !strings.HasPrefix(filepath.Base(w.Path()), "events.out.tfevents.") || filepath.Dir(w.Path()) != dir {
		t.Fatalf("event file %s, want %s/events.out.tfevents.*", w.Path(), dir)
	}
	evs := readEvents(t, w.Path())
	if len(evs) != 4 || evs[0].GetFileVersion() != FileVersion {
		t.Fatalf("%d events starting with %v, want 4 starting with the file version", len(evs), evs[0])
	}
	s := evs[1].GetSummary().GetValue()
	if evs[1].Step != 10 || evs[1].WallTime != 1700000000.25 || len(s) != 2 ||
		s[0].Tag != "loss" || s[0].GetSimpleValue() != 2.25 || s[1].Tag != "lr" || s[1].GetSimpleValue() != float32(1e-3) {
		t.Fatalf("scalar event %v", evs[1])
	}
	txt := evs[2].GetSummary().GetValue()
	if len(txt) != 1 || txt[0].GetMetadata().GetPluginData().GetPluginName() != "text" ||
		txt[0].GetTensor().GetDtype() != tbpb.DataType_DT_STRING || string(txt[0].GetTensor().GetStringVal()[0]) != "    {\"lr\": 0.001}" {
		t.Fatalf("text event %v", evs[2])
	}
	if evs[3].Step != 11 || evs[3].GetSessionLog().GetStatus() != tbpb.SessionLog_START {
		t.Fatalf("restart event %v", evs[3])
	}
}

// Two writers on one directory write two files.
func TestWritersDoNotShareFiles(t *testing.T) {
	dir := t.TempDir()
	a, err := Create(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := Create(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if a.Path() == b.Path() {
		t.Fatalf("both writers write %s", a.Path())
	}
}
