package main

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	"github.com/posttrainllm/posttrainllm/data"
	"github.com/posttrainllm/posttrainllm/data/chattemplate"
	"github.com/posttrainllm/posttrainllm/internal/realmodel"
)

// The issue's acceptance on the real SmolLM2-135M-Instruct: asked "What is
// the capital of France?" through its own chat template, it answers with
// Paris and stops at <|im_end|>: a greedy continuation of the same prompt
// without stop tokens (sample --prompt, special tokens written in it as
// their ids) is the reply, then "<|im_end|>". chat, reading the question
// from its input, gives the same reply and keeps the conversation for a
// second turn; an imported run (its tokenizer_config.json copied with it)
// chats the same way.
func TestRealModelChatAnswersParis(t *testing.T) {
	folder := realmodel.Folder(t)
	const question = "What is the capital of France?"
	greedy := []string{"--temperature", "0", "--tokens", "48", "--device", "cpu"}

	reply := strings.TrimSuffix(mustRun(t, append([]string{"sample", "--from", folder, "--chat", question}, greedy...)...).stdout, "\n")
	if !strings.Contains(reply, "Paris") {
		t.Fatalf("sample --chat answered %q, want Paris", reply)
	}
	tpl, err := chattemplate.Load(folder)
	if err != nil {
		t.Fatal(err)
	}
	prompt, err := tpl.Render([]data.Message{{Role: "user", Content: question}}, true)
	if err != nil {
		t.Fatal(err)
	}
	raw := mustRun(t, append([]string{"sample", "--from", folder, "--prompt", prompt}, greedy...)...).stdout
	if want := prompt + reply + "<|im_end|>"; !strings.HasPrefix(raw, want) {
		t.Fatalf("the prompt continued without stops:\n%q\nwant it to start with the reply and <|im_end|>:\n%q", raw, want)
	}

	chat := func(args ...string) string {
		t.Helper()
		cmd := command(append(append([]string{"chat"}, args...), greedy...)...)
		cmd.Stdin = strings.NewReader(question + "\nAnd of Italy?\n")
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		if err := cmd.Run(); err != nil {
			t.Fatalf("chat %v: %v\n%s", args, err, errOut.String())
		}
		return out.String()
	}
	out := chat("--from", folder)
	turns := strings.SplitN(out, "\n", 2)
	if len(turns) != 2 || turns[0] != reply || !strings.Contains(turns[1], "Rome") {
		t.Fatalf("chat printed %q; want the reply %q, then a second answer naming Rome", out, reply)
	}

	run := filepath.Join(t.TempDir(), "smollm")
	mustRun(t, "import", folder, "--out", run)
	if got := chat("--from", run); got != out {
		t.Fatalf("chat with the imported run printed %q, the folder %q", got, out)
	}
}

// serve, asked the same question through the chat completions API,
// answers with Paris and stops at <|im_end|> (finish_reason "stop").
// The same holds served straight from the GGUF file, listed under the
// file's name without .gguf.
func TestRealModelServeAnswersParis(t *testing.T) {
	for from, id := range map[string]string{realmodel.Folder(t): realmodel.Name, realmodel.GGUF(t): realmodel.Name + ".Q4_1"} {
		url := startServe(t, "--from", from)
		out := chatCompletion(t, url, `{"model": "`+id+`", "messages": [{"role": "user", "content": "What is the capital of France?"}], "temperature": 0, "max_tokens": 48}`)
		content, finish, n := reply(t, out)
		if !strings.Contains(content, "Paris") || finish != "stop" || n >= 48 {
			t.Fatalf("%s: reply %q, finish %q, %d tokens; want Paris, stop, fewer than 48", from, content, finish, n)
		}
	}
}
