package tboard

import (
	"bytes"
	"errors"
	"io"
	"os"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/posttrainllm/posttrainllm/tboard/tbpb"
)

// pythonRecords are the records scripts/tbproto/testdata.py wrote into
// testdata/python.tfevents with TensorBoard's RecordWriter, before its
// scalar event.
func pythonRecords() [][]byte {
	all := make([]byte, 256)
	for i := range all {
		all[i] = byte(i)
	}
	return [][]byte{{}, []byte("a"), []byte("hello tensorboard"), append(all, all...)}
}

// The framing matches TensorBoard's writer byte for byte: reading its file
// gives the records it was given, and writing them again gives the file.
func TestRecordsMatchTensorBoardsWriter(t *testing.T) {
	file, err := os.ReadFile("testdata/python.tfevents")
	if err != nil {
		t.Fatal(err)
	}
	r := bytes.NewReader(file)
	var got [][]byte
	for {
		rec, err := ReadRecord(r)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("record %d: %v", len(got), err)
		}
		got = append(got, rec)
	}
	want := pythonRecords()
	if len(got) != len(want)+1 {
		t.Fatalf("%d records, want %d", len(got), len(want)+1)
	}
	var again bytes.Buffer
	for i, rec := range got {
		if i < len(want) && !bytes.Equal(rec, want[i]) {
			t.Errorf("record %d = %q, want %q", i, rec, want[i])
		}
		if err := WriteRecord(&again, rec); err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(again.Bytes(), file) {
		t.Fatal("records written again differ from the file TensorBoard wrote")
	}
	var ev tbpb.Event
	if err := proto.Unmarshal(got[len(want)], &ev); err != nil {
		t.Fatal(err)
	}
	v := ev.GetSummary().GetValue()
	if ev.Step != 42 || ev.WallTime != 1700000000.5 || len(v) != 1 || v[0].Tag != "loss" || v[0].GetSimpleValue() != 2.5 {
		t.Fatalf("the Python event reads as %v", &ev)
	}
}

// The masked CRC of 8 zero bytes (an empty record's length) is the value
// TensorBoard's own masked_crc32c gives (tensorboard 2.20.0).
func TestMaskedCRCKnownValue(t *testing.T) {
	if got := MaskedCRC(make([]byte, 8)); got != 0x07980329 {
		t.Fatalf("MaskedCRC(8 zero bytes) = %#08x, want 0x07980329", got)
	}
}

// A flipped bit anywhere in a record, or a record cut short, is reported
// as corrupt, never returned as data.
func TestReadRecordRejectsCorruption(t *testing.T) {
	var buf bytes.Buffer
	if err := WriteRecord(&buf, []byte("a record of some length")); err != nil {
		t.Fatal(err)
	}
	good := buf.Bytes()
	for i := range good {
		bad := bytes.Clone(good)
		bad[i] ^= 0x10
		if _, err := ReadRecord(bytes.NewReader(bad)); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("bit flipped in byte %d: err = %v, want ErrCorrupt", i, err)
		}
	}
	for n := 1; n < len(good); n++ {
		if _, err := ReadRecord(bytes.NewReader(good[:n])); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("record cut to %d bytes: err = %v, want ErrCorrupt", n, err)
		}
	}
	if _, err := ReadRecord(bytes.NewReader(nil)); err != io.EOF {
		t.Fatalf("empty input: err = %v, want io.EOF", err)
	}
}
