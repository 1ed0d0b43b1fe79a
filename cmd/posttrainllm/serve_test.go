package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// startServe runs posttrainllm serve with args on a free port until the
// test ends, and returns its base URL.
func startServe(t *testing.T, args ...string) string {
	t.Helper()
	cmd := command(append([]string{"serve", "--addr", "127.0.0.1:0", "--device", "cpu"}, args...)...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(os.Interrupt)
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("serve did not stop cleanly on SIGINT: %v\n%s", err, stderr.String())
			}
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			t.Errorf("serve did not stop within 30 s of SIGINT")
		}
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("serve printed no address: %v\n%s", err, stderr.String())
	}
	i := strings.Index(line, "http://")
	if i < 0 {
		t.Fatalf("serve printed %q, want its address", line)
	}
	return strings.TrimSpace(line[i:])
}

// chatCompletion posts one chat completion and returns the decoded body.
func chatCompletion(t *testing.T, url, body string) map[string]any {
	t.Helper()
	resp, err := http.Post(url+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST /v1/chat/completions: %d %s", resp.StatusCode, raw)
	}
	var out map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("%v: %s", err, raw)
	}
	return out
}

// reply returns the message content, finish reason and completion tokens
// of a chat completion.
func reply(t *testing.T, out map[string]any) (string, string, int) {
	t.Helper()
	choices, _ := out["choices"].([]any)
	if len(choices) != 1 {
		t.Fatalf("choices %v", out["choices"])
	}
	c := choices[0].(map[string]any)
	msg, _ := c["message"].(map[string]any)
	content, _ := msg["content"].(string)
	finish, _ := c["finish_reason"].(string)
	usage, _ := out["usage"].(map[string]any)
	n, _ := usage["completion_tokens"].(float64)
	return content, finish, int(n)
}

// serve answers the OpenAI API with a model through its chat template: the
// model is listed under --model, and a greedy chat completion is the reply
// sample --chat prints, ending with "length" after max_tokens tokens.
func TestServeChatCompletion(t *testing.T) {
	folder := chatFolder(t)
	want := strings.TrimSuffix(mustRun(t, "sample", "--from", folder, "--chat", "Good morrow", "--temperature", "0", "--tokens", "6", "--device", "cpu").stdout, "\n")
	url := startServe(t, "--from", folder, "--model", "tiny-chat")
	resp, err := http.Get(url + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	models, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(models), `"id":"tiny-chat"`) {
		t.Fatalf("GET /v1/models: %s", models)
	}
	out := chatCompletion(t, url, `{"model": "tiny-chat", "messages": [{"role": "user", "content": "Good morrow"}], "temperature": 0, "max_tokens": 6}`)
	content, finish, n := reply(t, out)
	if content != want || n > 6 || n < 1 || (finish == "length") != (n == 6) {
		t.Fatalf("reply %q (%s, %d tokens), sample --chat %q", content, finish, n, want)
	}
}

// asJSONText is s as a JSON response carries it: each byte that is not
// part of valid UTF-8 becomes U+FFFD, as encoding/json writes it (an
// untrained model's text need not be valid UTF-8; sample prints its bytes).
func asJSONText(s string) string {
	var b strings.Builder
	for len(s) > 0 {
		r, n := utf8.DecodeRuneInString(s)
		if r == utf8.RuneError && n == 1 {
			b.WriteRune(utf8.RuneError)
		} else {
			b.WriteString(s[:n])
		}
		s = s[n:]
	}
	return b.String()
}

// The official openai Python client, as a user's program drives it,
// against serve on a small chat model: chat and completions, streamed and
// not; streamed text equals whole text at temperature 0, and equals
// sample's; a stop string cuts the text; 8 concurrent clients each get
// the answer they get alone; 10 malformed requests get the error shape and
// the server goes on answering (testdata/openai_client.py).
func TestOpenAIClientAgainstServe(t *testing.T) {
	folder := chatFolder(t)
	gen := []string{"--temperature", "0", "--tokens", "12", "--device", "cpu"}
	chatRef := strings.TrimSuffix(mustRun(t, append([]string{"sample", "--from", folder, "--chat", "Good morrow"}, gen...)...).stdout, "\n")
	prompt := "ROMEO: "
	completionRef := strings.TrimSuffix(mustRun(t, append([]string{"sample", "--from", folder, "--prompt", prompt}, gen...)...).stdout, "\n")
	url := startServe(t, "--from", folder, "--model", "tiny-chat")
	cmd := exec.Command(pinnedPython(t, "the openai client test"), filepath.Join("testdata", "openai_client.py"),
		url, "tiny-chat", asJSONText(chatRef), prompt, asJSONText(completionRef))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("openai_client.py: %v\n%s", err, out)
	}
	t.Logf("openai_client.py:\n%s", out)
	if !strings.Contains(string(out), "all checks passed") {
		t.Fatalf("openai_client.py ended early:\n%s", out)
	}
}
