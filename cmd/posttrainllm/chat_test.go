package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// chatFolder is a random-weight Llama folder with a SentencePiece-style
// tokenizer.json and a chat template in its tokenizer_config.json whose
// turns end with </s>.
func chatFolder(t *testing.T) string {
	t.Helper()
	src, err := os.ReadFile(shakespeare)
	if err != nil {
		t.Fatalf("the shared text is missing: %v", err)
	}
	text := filepath.Join(t.TempDir(), "text.txt")
	if err := os.WriteFile(text, src[:50_000], 0o644); err != nil {
		t.Fatal(err)
	}
	sp := spTokenizer(t, text)
	folder := hfFolder(t, "--family", "llama", "--vocab", "900")
	copyFiles(t, sp, folder, "tokenizer.json")
	cfg := `{"bos_token": "<s>", "eos_token": "</s>", "chat_template": "{% for m in messages %}{{ '<s>' + m.role + '\\n' + m.content + '</s>' }}{% endfor %}{% if add_generation_prompt %}{{ '<s>assistant\\n' }}{% endif %}"}`
	if err := os.WriteFile(filepath.Join(folder, "tokenizer_config.json"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return folder
}

// chat reads its turns from the input: the first reply is sample --chat's
// for the same question, the conversation goes on to a second turn, and
// after /reset the same question gets the first reply again; --system
// changes the reply. With a terminal absent, no prompt is printed.
func TestChatTurnsAndReset(t *testing.T) {
	folder := chatFolder(t)
	gen := []string{"--temperature", "0", "--tokens", "12", "--device", "cpu"}
	first := mustRun(t, append([]string{"sample", "--from", folder, "--chat", "Good morrow"}, gen...)...).stdout
	chat := func(input string, args ...string) string {
		t.Helper()
		cmd := command(append(append([]string{"chat", "--from", folder}, args...), gen...)...)
		cmd.Stdin = strings.NewReader(input)
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		if err := cmd.Run(); err != nil {
			t.Fatalf("chat: %v\n%s", err, errOut.String())
		}
		return out.String()
	}
	out := chat("Good morrow\nWhat news?\n/reset\nGood morrow\n/exit\nnot read\n")
	const cleared = "(conversation cleared)\n"
	if !strings.HasPrefix(out, first) || !strings.HasSuffix(out, cleared+first) || strings.Count(out, cleared) != 1 {
		t.Fatalf("chat printed %q; want the reply %q first and again after %q", out, first, cleared)
	}
	if len(out) <= len(first)*2+len(cleared) {
		t.Fatalf("chat printed %q: no second turn", out)
	}
	withSystem := mustRun(t, append([]string{"sample", "--from", folder, "--chat", "Good morrow", "--system", "Speak as a king."}, gen...)...).stdout
	if withSystem == first {
		t.Fatalf("--system changed nothing: %q", first)
	}
	if got := chat("Good morrow\n", "--system", "Speak as a king."); got != withSystem {
		t.Fatalf("chat --system replied %q, sample --chat --system %q", got, withSystem)
	}
}

// Command lines chat and sample --chat cannot run are usage errors (exit 2)
// that name the flag, before any model loads.
func TestChatRejectsBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"chat"}, "chat needs --from"},
		{[]string{"chat", "--from", "/nonexistent/run"}, "invalid --from /nonexistent/run"},
		{[]string{"chat", "--from", ".", "--top-p", "1.5"}, "invalid --top-p 1.5"},
		{[]string{"sample", "--from", ".", "--chat", "hi", "--prompt", "x"}, "--chat and --prompt"},
		{[]string{"sample", "--from", ".", "--system", "s"}, "--system goes with --chat"},
		{[]string{"sample", "--from", ".", "--chat", "hi", "--tokens", "0"}, "invalid --tokens 0"},
	} {
		r := runCLI(t, tc.args...)
		if r.code != 2 || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", tc.args, r.code, r.stderr, tc.want)
		}
	}
}
