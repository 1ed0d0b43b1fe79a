package main

import (
	"strings"
	"testing"

	"github.com/posttrainllm/posttrainllm/internal/realmodel"
)

// --dtype sets the compute dtype of a Hugging Face folder for generation:
// bench --generate on SmolLM2's float32 folder reports half the key/value
// bytes per token in bfloat16, sample answers in it, and a dtype that is
// not one is refused with one line and exit 2, before anything loads.
func TestGenerationDtype(t *testing.T) {
	folder := realmodel.Folder(t)
	kvBytes := func(args ...string) string {
		t.Helper()
		r := mustRun(t, append([]string{"bench", "--generate", folder, "--streams", "1", "--prompt-tokens", "4", "--gen-tokens", "2", "--device", "cpu"}, args...)...)
		for _, line := range strings.Split(r.stdout, "\n") {
			if rest, ok := strings.CutPrefix(line, "kv cache: "); ok {
				return strings.Fields(rest)[0]
			}
		}
		t.Fatalf("bench --generate %v printed no kv cache line:\n%s", args, r.stdout)
		return ""
	}
	// SmolLM2: 30 layers × 3 KV heads × 64 × keys and values.
	if got := kvBytes(); got != "46080" {
		t.Errorf("float32: %s KV bytes per token, want 46080", got)
	}
	if got := kvBytes("--dtype", "bfloat16"); got != "23040" {
		t.Errorf("--dtype bfloat16: %s KV bytes per token, want 23040", got)
	}
	r := mustRun(t, "sample", "--from", folder, "--dtype", "bfloat16", "--prompt", "The capital of France is", "--tokens", "4", "--temperature", "0")
	if !strings.HasPrefix(r.stdout, "The capital of France is") || len(r.stdout) <= len("The capital of France is")+1 {
		t.Fatalf("sample in bfloat16 printed %q, want the prompt and its continuation", r.stdout)
	}
	r = runCLI(t, "serve", "--from", folder, "--dtype", "fp8")
	if r.code != 2 {
		t.Fatalf("serve --dtype fp8: exit %d, want 2", r.code)
	}
	checkErrorLine(t, "serve --dtype fp8", r.stderr, "invalid --dtype fp8: want float32, bfloat16 or float16")
}
