package rl

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/posttrainllm/posttrainllm/data"
)

// script writes an executable file holding body and returns its path.
func script(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "reward")
	if err := os.WriteFile(path, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// programItems are a text prompt and a chat prompt with an answer field,
// each with a completion.
func programItems() []Item {
	return []Item{
		{
			Prompt:     Prompt{Text: "2+3?", Fields: map[string]any{"prompt": "2+3?", "answer": "5", "level": 1.0}},
			Completion: Completion{Text: "<answer>5</answer>", Tokens: 7},
		},
		{
			Prompt: Prompt{
				Messages: []data.Message{{Role: "user", Content: "4+4?"}},
				Fields:   map[string]any{"messages": []any{map[string]any{"role": "user", "content": "4+4?"}}, "answer": "8"},
			},
			Completion: Completion{Text: "<answer>9", Tokens: 32, Truncated: true},
		},
		{
			Prompt:     Prompt{Text: "1+1?"}, // built in Go: no fields
			Completion: Completion{Text: "2 <\"&>", Tokens: 3},
		},
	}
}

func TestProgramScores(t *testing.T) {
	py := script(t, `#!/usr/bin/env python3
import json, sys
for line in sys.stdin:
    o = json.loads(line)
    s = o["tokens"] + (100 if o["truncated"] else 0)
    if o.get("answer") is not None and o["completion"] == "<answer>" + o["answer"] + "</answer>":
        s += 0.5
    if o["prompt"] is None:
        s += 1000
    print(s)
`)
	got, err := Program("checker", []string{"python3", py}, 10*time.Second).Score(context.Background(), programItems())
	if err != nil {
		t.Fatal(err)
	}
	// By hand: 7 + 0.5 (right answer); 32 + 100 (truncated) + 1000 (chat
	// prompt); 3.
	if want := []float64{7.5, 1132, 3}; !reflect.DeepEqual(got, want) {
		t.Errorf("scores %v, want %v", got, want)
	}
}

func TestProgramInput(t *testing.T) {
	dir := t.TempDir()
	copyTo := filepath.Join(dir, "stdin.jsonl")
	sh := script(t, "#!/bin/sh\ntee \""+copyTo+"\" | while read -r line; do echo 0; done\n")
	if _, err := Program("copy", []string{"/bin/sh", sh}, 10*time.Second).Score(context.Background(), programItems()); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(copyTo)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var got []map[string]any
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var o map[string]any
		if err := json.Unmarshal(sc.Bytes(), &o); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		got = append(got, o)
	}
	want := []map[string]any{
		{"prompt": "2+3?", "messages": nil, "answer": "5", "level": 1.0, "completion": "<answer>5</answer>", "tokens": 7.0, "truncated": false},
		{"prompt": nil, "messages": []any{map[string]any{"role": "user", "content": "4+4?"}}, "answer": "8", "completion": "<answer>9", "tokens": 32.0, "truncated": true},
		{"prompt": "1+1?", "messages": nil, "completion": "2 <\"&>", "tokens": 3.0, "truncated": false},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("the program read\n%v\nwant\n%v", got, want)
	}
}

// programError runs a program on programItems and returns its error.
func programError(t *testing.T, timeout time.Duration, argv ...string) error {
	t.Helper()
	_, err := Program("prog", argv, timeout).Score(context.Background(), programItems())
	if err == nil {
		t.Fatalf("no error from %v", argv)
	}
	return err
}

func TestProgramErrors(t *testing.T) {
	long := strings.Repeat("x", 10000)
	for _, tc := range []struct {
		name, body string
		want       []string
	}{
		{"too few lines", "cat >/dev/null; echo 1; echo 2", []string{"reward prog", "wrote 2 lines for 3 completions"}},
		{"too many lines", "cat >/dev/null; printf '1\\n2\\n3\\n4\\n'", []string{"wrote 4 lines for 3 completions"}},
		{"no output", "cat >/dev/null", []string{"wrote 0 lines for 3 completions"}},
		{"not a number", "cat >/dev/null; printf '1\\nscore: 2\\n3\\n'", []string{`line 2 of its output is "score: 2", want a finite number`}},
		{"blank line", "cat >/dev/null; printf '1\\n\\n3\\n'", []string{`line 2 of its output is "", want a finite number`}},
		{"nan", "cat >/dev/null; printf '1\\n2\\nNaN\\n'", []string{`line 3 of its output is "NaN"`}},
		{"inf", "cat >/dev/null; printf 'inf\\n2\\n3\\n'", []string{`line 1 of its output is "inf"`}},
		{"exit", "cat >/dev/null; echo 'Traceback: KeyError answer' >&2; exit 3", []string{"reward prog", "exit status 3", "stderr: Traceback: KeyError answer"}},
		{"exit long stderr", "cat >/dev/null; echo " + long + " >&2; echo 'the last words' >&2; exit 1", []string{"exit status 1", "…x", "the last words"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := programError(t, 10*time.Second, "/bin/sh", script(t, tc.body))
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
			if len(err.Error()) > 3000 {
				t.Errorf("error is %d bytes long, want the stderr's tail only", len(err.Error()))
			}
		})
	}
	if err := programError(t, time.Second, filepath.Join(t.TempDir(), "missing")); !strings.Contains(err.Error(), "missing") {
		t.Errorf("error %q does not name the missing program", err)
	}
	if err := programError(t, time.Second); !strings.Contains(err.Error(), "no program") {
		t.Errorf("empty command line: error %q", err)
	}
	if err := programError(t, 0, "/bin/true"); !strings.Contains(err.Error(), "timeout 0s, want > 0") {
		t.Errorf("zero timeout: error %q", err)
	}
}

func TestProgramHangKilled(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "child.pid")
	// The shell waits on a child, which must die with it.
	sh := script(t, "#!/bin/sh\nsleep 60 &\necho $! > \""+pidFile+"\"\nwait\n")
	err := programError(t, 300*time.Millisecond, "/bin/sh", sh)
	for _, w := range []string{"reward prog", "hung for its timeout of 300ms and was killed"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not contain %q", err, w)
		}
	}
	b, err := os.ReadFile(pidFile)
	if errors.Is(err, os.ErrNotExist) {
		t.Log("the shell was killed before it started its child")
		return
	} else if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		return // no /proc to look at the child in
	}
	// The child dies (gone, or a zombie awaiting its reaper) rather than
	// sleeping on: the kill went to the whole process group. A killed
	// process takes a moment to exit; ten seconds bound the wait.
	state := "S"
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if state = procState(pid); state == "" || state == "Z" || state == "X" {
			return
		}
	}
	t.Errorf("the program's child %d is still alive (state %s) after the timeout", pid, state)
}

// procState is the state letter of process pid in /proc, "" when there
// is no such process.
func procState(pid int) string {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	if len(f) == 0 {
		return ""
	}
	return f[0]
}

func TestProgramIgnoresUnreadInput(t *testing.T) {
	// A program that answers without reading its (large) input.
	sh := script(t, "#!/bin/sh\necho 1; echo 2; echo 3\n")
	items := programItems()
	for i := range items {
		items[i].Completion.Text = strings.Repeat("y", 1<<20)
	}
	got, err := Program("p", []string{"/bin/sh", sh}, 10*time.Second).Score(context.Background(), items)
	if err != nil {
		t.Fatal(err)
	}
	if want := []float64{1, 2, 3}; !reflect.DeepEqual(got, want) {
		t.Errorf("scores %v, want %v", got, want)
	}
}

func TestProgramCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := Program("p", []string{"/bin/sh", "-c", "sleep 60"}, time.Minute).Score(ctx, programItems())
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("error %v, want context.Canceled", err)
	}
	// No items: nothing to run, nothing to fail.
	got, err := Program("p", []string{"/nonexistent"}, time.Second).Score(context.Background(), nil)
	if err != nil || len(got) != 0 {
		t.Fatalf("no items: %v, %v; want no scores and no error", got, err)
	}
}
