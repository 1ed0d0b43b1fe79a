package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/posttrainllm/posttrainllm/finetune"
)

// writePreferences writes n preference records whose chosen answer ends
// with " ok" and rejected one with " no".
func writePreferences(t *testing.T, dir, name string, n int) string {
	t.Helper()
	var b strings.Builder
	for i := 0; i < n; i++ {
		prompt := fmt.Sprintf("q%d=", i)
		rec, _ := json.Marshal(map[string]string{"prompt": prompt, "chosen": fmt.Sprint(i) + " ok", "rejected": fmt.Sprint(i) + " no"})
		b.Write(append(rec, '\n'))
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// finetune --objective dpo from the command line: the header names the
// objective and its reference, the data are pairs, the summary prints the
// held-out preference accuracy before and after, the metrics carry the
// rewards, a resume keeps the objective (and refuses another), and a full
// DPO fine-tune keeps its reference log-probabilities in the run folder.
func TestFinetuneDPO(t *testing.T) {
	dir := t.TempDir()
	base := filepath.Join(dir, "base")
	mustRun(t, "train", "--preset", "tiny", "--steps", "10", "--corpus", writeCorpus(t, dir, "corpus.txt", 40_000),
		"--out", base, "--no-progress")
	trainFile, validFile := writePreferences(t, dir, "train.jsonl", 16), writePreferences(t, dir, "valid.jsonl", 6)
	out := filepath.Join(dir, "dpo")
	r := mustRun(t, "finetune", "--from", base, "--data", trainFile, "--valid", validFile, "--out", out, "--objective", "dpo",
		"--steps", "4", "--eval-every", "2", "--targets", "attn,mlp", "--no-progress")
	for _, want := range []string{"objective: dpo, beta 0.1, reference: the base (adapters off", "16 preference pairs", "1 trace(s)",
		"held-out accuracy 0.500 -> "} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("finetune --objective dpo output lacks %q:\n%s", want, r.stdout)
		}
	}
	ms := readMetrics(t, out)
	if len(ms) == 0 || ms[len(ms)-1].Aux == nil || ms[len(ms)-1].ValAux == nil || ms[0].ValAux["accuracy"] != 0.5 {
		t.Errorf("metrics.jsonl lacks the preference metrics: %+v", ms)
	}
	mustRun(t, "finetune", "--resume", out, "--objective", "dpo", "--steps", "6", "--no-progress")
	r = runCLI(t, "finetune", "--resume", out, "--objective", "ipo", "--steps", "8")
	checkCleanFailure(t, "--objective ipo with --resume", r, "--objective", "--resume")
	r = runCLI(t, "finetune", "--from", base, "--data", trainFile, "--objective", "dpo", "--batch", "3", "--out", filepath.Join(dir, "odd"))
	checkCleanFailure(t, "odd --batch", r, "even")

	full := filepath.Join(dir, "full")
	r = mustRun(t, "finetune", "--from", base, "--data", trainFile, "--valid", validFile, "--out", full, "--objective", "dpo",
		"--method", "full", "--steps", "2", "--eval-every", "2", "--no-progress")
	if !strings.Contains(r.stdout, finetune.ReferenceFile) {
		t.Errorf("full DPO header does not name its reference file:\n%s", r.stdout)
	}
	if _, err := os.Stat(filepath.Join(full, finetune.ReferenceFile)); err != nil {
		t.Errorf("full DPO run folder: %v", err)
	}
}
