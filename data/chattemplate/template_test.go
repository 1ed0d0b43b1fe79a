package chattemplate

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/posttrainllm/posttrainllm/data"
	"github.com/posttrainllm/posttrainllm/internal/pyenv"
)

// python is the interpreter of the project-local environment that holds
// the pinned jinja2 the reference renders with.
func python(t *testing.T) string {
	t.Helper()
	return pyenv.Reference(t)
}

// refCase is one rendering for testdata/render.py.
type refCase struct {
	Template string         `json:"template"`
	Messages []data.Message `json:"messages"`
	AGP      bool           `json:"add_generation_prompt"`
	BOS      string         `json:"bos_token"`
	EOS      string         `json:"eos_token"`
	Now      string         `json:"now"`
}

// refResult is render.py's answer for one case.
type refResult struct {
	Text  *string `json:"text"`
	Error string  `json:"error"`
}

// pythonRender renders cases with Python's jinja2 as transformers sets it
// up (testdata/render.py).
func pythonRender(t *testing.T, cases []refCase) []refResult {
	t.Helper()
	in, err := json.Marshal(cases)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(python(t), filepath.Join("testdata", "render.py"))
	cmd.Stdin = bytes.NewReader(in)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("render.py: %v\n%s", err, stderr.String())
	}
	var res []refResult
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("render.py output: %v", err)
	}
	if len(res) != len(cases) {
		t.Fatalf("render.py answered %d cases of %d", len(res), len(cases))
	}
	return res
}

// readTemplate reads testdata/name.
func readTemplate(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// testNow is the fixed clock of the comparisons: a date no template
// defaults to, so a template that ignored strftime_now would differ.
var testNow = time.Date(2025, time.March, 9, 17, 4, 5, 0, time.UTC)

// conversations are the message lists the comparisons render: plain and
// with a system message, multi-turn, whitespace and newlines at the
// edges of contents, characters Jinja or JSON could mangle, and two user
// turns in a row (which Mistral's template refuses with raise_exception).
var conversations = map[string][]data.Message{
	"user":     {{Role: "user", Content: "What is the capital of France?"}},
	"system":   {{Role: "system", Content: "Be brief."}, {Role: "user", Content: "Hi"}},
	"multi":    {{Role: "user", Content: "Hi there"}, {Role: "assistant", Content: "Hello! How can I help?"}, {Role: "user", Content: "Tell me a joke."}},
	"multisys": {{Role: "system", Content: "You are terse.\nVery terse."}, {Role: "user", Content: "Q1"}, {Role: "assistant", Content: "A1"}, {Role: "user", Content: "Q2"}, {Role: "assistant", Content: "A2"}},
	"spaces":   {{Role: "user", Content: "  leading and trailing  \n"}, {Role: "assistant", Content: "\n\tcode {\n  x\n}\n"}},
	"unicode":  {{Role: "user", Content: "日本語 \"quotes\" 'single' é 🙂 {{ not a tag }} {% raw %} \\n"}, {Role: "assistant", Content: "ok <b>&amp;</b> %}"}},
	"twousers": {{Role: "user", Content: "a"}, {Role: "user", Content: "b"}},
	"empty":    {{Role: "user", Content: ""}, {Role: "assistant", Content: ""}},
}

// templates are the real chat templates of testdata, with the special
// tokens their models' tokenizer_config.json give as bos and eos.
var templates = []struct{ file, bos, eos string }{
	{"smollm2.jinja", "<|im_start|>", "<|im_end|>"},
	{"llama-3.2.jinja", "<|begin_of_text|>", "<|eot_id|>"},
	{"qwen-2.5.jinja", "", "<|im_end|>"},
	{"mistral-v0.3.jinja", "<s>", "</s>"},
	{"gemma-3.jinja", "<bos>", "<eos>"},
}

// TestRenderMatchesJinja2 renders every template with every conversation,
// with and without the generation prompt, and compares with Python's
// jinja2 under transformers' settings byte for byte; where jinja2 raises
// (the template's raise_exception), Render must fail too.
func TestRenderMatchesJinja2(t *testing.T) {
	type run struct {
		name string
		tpl  *Template
		msgs []data.Message
		agp  bool
	}
	var runs []run
	var cases []refCase
	for _, tf := range templates {
		src := readTemplate(t, tf.file)
		tpl, err := New(src, tf.bos, tf.eos)
		if err != nil {
			t.Fatalf("%s: %v", tf.file, err)
		}
		tpl.Now = func() time.Time { return testNow }
		for name, msgs := range conversations {
			for _, agp := range []bool{false, true} {
				runs = append(runs, run{tf.file + "/" + name, tpl, msgs, agp})
				cases = append(cases, refCase{src, msgs, agp, tf.bos, tf.eos, testNow.Format("2006-01-02T15:04:05")})
			}
		}
	}
	ref := pythonRender(t, cases)
	errors := 0
	for i, r := range runs {
		got, err := r.tpl.Render(r.msgs, r.agp)
		want := ref[i]
		switch {
		case want.Text == nil:
			errors++
			if err == nil {
				t.Errorf("%s agp=%v: jinja2 fails (%s), Render gave %q", r.name, r.agp, want.Error, got)
			}
		case err != nil:
			t.Errorf("%s agp=%v: %v; jinja2 renders %q", r.name, r.agp, err, *want.Text)
		case got != *want.Text:
			t.Errorf("%s agp=%v:\n got  %q\n want %q", r.name, r.agp, got, *want.Text)
		}
	}
	if errors == 0 || errors == len(runs) {
		t.Fatalf("jinja2 refused %d of %d renderings: the comparison covers no refusal or nothing else", errors, len(runs))
	}
}

// TestStrftimeMatchesPython renders strftime_now with the directives
// chat templates use, at times that exercise padding, noon and midnight,
// and compares with Python's datetime.strftime.
func TestStrftimeMatchesPython(t *testing.T) {
	const src = `{{ strftime_now("%d %b %Y|%-d %B|%a %A|%H:%M:%S|%I %p|%-I|%j|%y|%m %-m|%e|%%|%Y-%m-%d") }}`
	var cases []refCase
	var times []time.Time
	for _, tm := range []time.Time{
		testNow,
		time.Date(2024, time.July, 26, 0, 0, 0, 0, time.UTC),
		time.Date(1999, time.December, 31, 12, 59, 9, 0, time.UTC),
	} {
		times = append(times, tm)
		cases = append(cases, refCase{src, []data.Message{{Role: "user", Content: "x"}}, false, "", "", tm.Format("2006-01-02T15:04:05")})
	}
	ref := pythonRender(t, cases)
	for i, tm := range times {
		tpl, err := New(src, "", "")
		if err != nil {
			t.Fatal(err)
		}
		tpl.Now = func() time.Time { return tm }
		got, err := tpl.Render(cases[i].Messages, false)
		if err != nil {
			t.Fatal(err)
		}
		if ref[i].Text == nil || got != *ref[i].Text {
			t.Errorf("%v: got %q, Python %+v", tm, got, ref[i])
		}
	}
}
