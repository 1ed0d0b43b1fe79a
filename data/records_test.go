package data

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseRecordsReadsEveryForm(t *testing.T) {
	in := `{"text": "hello"}

{"prompt": "Q: ", "completion": "", "id": 7}
{"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}
`
	recs, err := ParseRecords(strings.NewReader(in), "train.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 3 {
		t.Fatalf("%d records, want 3", len(recs))
	}
	if r := recs[0]; r.Kind != TextRecord || r.Text != "hello" || r.Line != 1 {
		t.Errorf("record 1 = %+v", r)
	}
	if r := recs[1]; r.Kind != CompletionRecord || r.Prompt != "Q: " || r.Completion != "" || r.Line != 3 {
		t.Errorf("record 2 = %+v", r)
	}
	if r := recs[2]; r.Kind != ChatRecord || len(r.Messages) != 3 || r.Messages[2].Content != "yo" || r.Line != 4 {
		t.Errorf("record 3 = %+v", r)
	}
}

// A bad record is an error naming the file, its line and the problem.
func TestParseRecordsNamesTheBadLine(t *testing.T) {
	for _, tc := range []struct{ line, want string }{
		{`{"text": "a"`, "not a JSON object"},
		{`[1, 2]`, "not a JSON object"},
		{`{"id": 3}`, `no "text", "prompt"/"completion" or "messages" field`},
		{`{"text": "a", "prompt": "b", "completion": "c"}`, "has both text and prompt/completion"},
		{`{"prompt": "b"}`, `want both "prompt" and "completion"`},
		{`{"text": ""}`, `"text" is empty`},
		{`{"messages": []}`, `"messages" is empty`},
		{`{"messages": [{"role": "bot", "content": "x"}]}`, `message 1 has role "bot"`},
		{`{"completion": "a\u0000b", "prompt": ""}`, `"completion" contains a NUL`},
	} {
		in := `{"text": "fine"}` + "\n" + tc.line + "\n"
		_, err := ParseRecords(strings.NewReader(in), "d.jsonl")
		if err == nil || !strings.HasPrefix(err.Error(), "d.jsonl:2: ") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want d.jsonl:2: …%s…", tc.line, err, tc.want)
		}
	}
	if _, err := ParseRecords(strings.NewReader("\n\n"), "empty.jsonl"); err == nil || !strings.Contains(err.Error(), "empty.jsonl: no records") {
		t.Errorf("empty input: error %v", err)
	}
}

func TestReadRecordsNamesMissingFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "nope.jsonl")
	if _, err := ReadRecords(path); err == nil || !strings.Contains(err.Error(), "nope.jsonl") {
		t.Errorf("error %v, want one naming the file", err)
	}
	ok := filepath.Join(t.TempDir(), "ok.jsonl")
	if err := os.WriteFile(ok, []byte(`{"text": "x"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if recs, err := ReadRecords(ok); err != nil || len(recs) != 1 {
		t.Errorf("ReadRecords = %v, %v", recs, err)
	}
}

// Whatever a line holds, parsing returns records of one form without NUL
// characters, or an error naming the line; it never panics.
func FuzzParseRecords(f *testing.F) {
	for _, s := range []string{
		`{"text": "a"}`, `{"prompt": "p", "completion": ""}`,
		`{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}`,
		`{"messages": [{"role": "user"}]}`, `{"text": "a\u0000"}`, `[]`, `{`, `null`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		recs, err := ParseRecords(strings.NewReader(in), "f.jsonl")
		if err != nil {
			if !strings.HasPrefix(err.Error(), "f.jsonl") {
				t.Fatalf("error %q does not name the file", err)
			}
			return
		}
		for _, r := range recs {
			if _, nul := r.nulField(); nul {
				t.Fatalf("accepted a record with a NUL: %+v", r)
			}
			switch r.Kind {
			case TextRecord:
				if r.Text == "" || r.Messages != nil {
					t.Fatalf("text record %+v", r)
				}
			case ChatRecord:
				if len(r.Messages) == 0 {
					t.Fatalf("chat record without messages %+v", r)
				}
			}
		}
	})
}
