// Command grpo shows online RL with a reward written in Go: it pretrains
// the tiny preset briefly on a text corpus, then fine-tunes it with GRPO
// (LoRA) on prompts taken from the same text, rewarding completions by
// the share of their letters that are vowels, a reward the model can
// move in a few updates. It reports the mean reward of each logged
// update and the held-out mean reward before and after.
//
//	go run ./examples/grpo -corpus ../shared/data/tinyshakespeare.txt
//
// The command line trains with built-in rewards or a reward program
// instead (--reward, --reward-cmd; docs/grpo.md).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"unicode"

	"github.com/posttrainllm/posttrainllm/examples/internal/tinybase"
	"github.com/posttrainllm/posttrainllm/finetune"
	"github.com/posttrainllm/posttrainllm/rl"
	"github.com/posttrainllm/posttrainllm/train"
)

func main() {
	corpus := flag.String("corpus", "../shared/data/tinyshakespeare.txt", "text to pretrain on and take prompts from")
	out := flag.String("out", "", "working folder (default: a temporary one, removed at the end)")
	pretrain := flag.Int("pretrain-steps", 200, "pretraining updates of the tiny preset")
	updates := flag.Int("updates", 20, "GRPO updates")
	flag.Parse()
	if err := run(os.Stdout, *corpus, *out, *pretrain, *updates); err != nil {
		fmt.Fprintln(os.Stderr, "grpo:", err)
		os.Exit(1)
	}
}

// vowelShare is the example's own reward: the share of a completion's
// letters that are vowels (0 for a completion without letters).
func vowelShare(_ context.Context, _ rl.Prompt, c rl.Completion) (float64, error) {
	letters, vowels := 0, 0
	for _, r := range c.Text {
		if !unicode.IsLetter(r) {
			continue
		}
		letters++
		if strings.ContainsRune("aeiouAEIOU", r) {
			vowels++
		}
	}
	if letters == 0 {
		return 0, nil
	}
	return float64(vowels) / float64(letters), nil
}

func run(w io.Writer, corpus, out string, pretrainSteps, updates int) error {
	if pretrainSteps < 1 || updates < 1 {
		return fmt.Errorf("-pretrain-steps %d and -updates %d: want >= 1 each", pretrainSteps, updates)
	}
	out, cleanup, err := tinybase.WorkDir(out, "posttrainllm-grpo-")
	if err != nil {
		return err
	}
	defer cleanup()
	base, err := tinybase.Pretrain(w, corpus, filepath.Join(out, "base"), pretrainSteps)
	if err != nil {
		return err
	}
	trainFile, validFile, err := writePrompts(corpus, out)
	if err != nil {
		return err
	}
	settings := finetune.GRPO{Rollout: rl.RolloutOptions{GroupSize: 8, MaxCompletion: 12, Temperature: 1}}
	obj, err := finetune.NewGRPOObjective(settings, rl.Weighted{Weight: 1, Scorer: rl.FromFunc("vowels", vowelShare)})
	if err != nil {
		return err
	}
	cfg := train.Config{Steps: updates, Batch: 32, Accum: 1, Optimizer: "adamw", Schedule: "constant",
		LR: 3e-3, GradClip: 1, Compile: true, Device: "cpu", Seed: 1, LogEvery: 5, EvalEvery: updates}
	ft := finetune.Config{Base: base, Method: finetune.MethodLoRA, Rank: 8, Alpha: 16, Targets: []string{"all"},
		Train: trainFile, Valid: validFile}
	f, err := finetune.NewWithObjective(cfg, ft, obj, filepath.Join(out, "grpo"))
	if err != nil {
		return err
	}
	f.Hooks.OnLog = func(m train.Metrics) {
		fmt.Fprintf(w, "update %3d  reward %.3f  (std %.3f)  completion length %.1f\n",
			m.Step, m.Aux["reward"], m.Aux["reward_std"], m.Aux["completion_len"])
	}
	sum, err := f.Run(context.Background(), "")
	if err != nil {
		return err
	}
	// The held-out loss of GRPO is the negated mean reward.
	fmt.Fprintf(w, "held-out mean reward: %.3f -> %.3f (%d updates, %d trace(s))\n", -sum.InitialValLoss, -sum.ValLoss, sum.Step, sum.Traces)
	return nil
}

// writePrompts writes the first three words of lines (at most 20 bytes) of the corpus as GRPO
// prompt records: 256 to train on and 32 held out.
func writePrompts(corpus, out string) (trainFile, validFile string, err error) {
	text, err := os.ReadFile(corpus)
	if err != nil {
		return "", "", err
	}
	var prompts []string
	for _, line := range strings.Split(string(text), "\n") {
		if words := strings.Fields(line); len(words) >= 4 && !strings.HasSuffix(words[0], ":") {
			if p := strings.Join(words[:3], " "); len(p) <= 20 { // with the chat template, within the tiny preset's 64 tokens
				prompts = append(prompts, p)
			}
		}
		if len(prompts) == 288 {
			break
		}
	}
	if len(prompts) < 288 {
		return "", "", fmt.Errorf("%s: %d lines of 4 or more words, want 288", corpus, len(prompts))
	}
	write := func(name string, ps []string) (string, error) {
		var b strings.Builder
		for _, p := range ps {
			line, _ := json.Marshal(map[string]string{"prompt": p})
			b.Write(append(line, '\n'))
		}
		path := filepath.Join(out, name)
		return path, os.WriteFile(path, []byte(b.String()), 0o644)
	}
	if trainFile, err = write("train.jsonl", prompts[:256]); err != nil {
		return "", "", err
	}
	validFile, err = write("valid.jsonl", prompts[256:])
	return trainFile, validFile, err
}
