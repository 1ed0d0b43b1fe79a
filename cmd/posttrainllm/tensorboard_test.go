package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/posttrainllm/posttrainllm/train"
)

// tbRead is what TensorBoard's own reader (EventAccumulator, through
// testdata/tb_scalars.py) finds in a run folder's event files.
type tbRead struct {
	Scalars map[string][][2]float64 `json:"scalars"` // tag: [step, value] pairs
	Text    map[string][][2]any     `json:"text"`    // tag: [step, text] pairs
}

// readTensorBoard runs the pinned tensorboard package's reader on dir.
func readTensorBoard(t *testing.T, dir string) tbRead {
	t.Helper()
	cmd := exec.Command(pinnedPython(t, "TensorBoard's reader"), filepath.Join("testdata", "tb_scalars.py"), dir)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("tb_scalars.py %s: %v\n%s", dir, err, stderr.String())
	}
	var r tbRead
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("tb_scalars.py output: %v\n%s", err, out)
	}
	return r
}

// jsonlSeries reads metrics.jsonl as TensorBoard should show it: for every
// number of every line but the step, a (step, value) point of the series
// named like the field. The step-0 line of a fresh run measured only its
// held-out loss: there only lr and the val_ fields count.
func jsonlSeries(t *testing.T, run string) map[string][][2]float64 {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(run, train.MetricsFile))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][][2]float64{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		var line map[string]float64
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			t.Fatalf("metrics line %s: %v", sc.Bytes(), err)
		}
		step := line["step"]
		_, trained := line["loss_last"]
		for k, v := range line {
			if k == "step" || (!trained && k != "lr" && !strings.HasPrefix(k, "val_")) {
				continue
			}
			out[k] = append(out[k], [2]float64{step, v})
		}
	}
	return out
}

// checkSameSeries compares the event files of run, read by TensorBoard,
// with its metrics.jsonl: the same series, the same steps, the same values
// as float32 (the precision of a scalar summary).
func checkSameSeries(t *testing.T, run string, want ...string) tbRead {
	t.Helper()
	got := readTensorBoard(t, filepath.Join(run, train.TensorBoardDir))
	exp := jsonlSeries(t, run)
	var gotTags, expTags []string
	for k := range got.Scalars {
		gotTags = append(gotTags, k)
	}
	for k := range exp {
		expTags = append(expTags, k)
	}
	slices.Sort(gotTags)
	slices.Sort(expTags)
	if !slices.Equal(gotTags, expTags) {
		t.Fatalf("TensorBoard reads series %v, metrics.jsonl has %v", gotTags, expTags)
	}
	for _, k := range want {
		if len(exp[k]) == 0 {
			t.Errorf("metrics.jsonl has no %s series", k)
		}
	}
	for _, k := range expTags {
		g, e := got.Scalars[k], exp[k]
		if len(g) != len(e) {
			t.Errorf("%s: TensorBoard reads %d points %v, metrics.jsonl has %d %v", k, len(g), g, len(e), e)
			continue
		}
		for i := range e {
			if g[i][0] != e[i][0] || float32(g[i][1]) != float32(e[i][1]) {
				t.Errorf("%s point %d: TensorBoard reads step %v value %v, metrics.jsonl has step %v value %v",
					k, i, g[i][0], g[i][1], e[i][0], e[i][1])
			}
		}
	}
	return got
}

// A tiny run's event files, resumed from an earlier checkpoint than its
// last (as after a crash), then fine-tuned, read in TensorBoard exactly as
// metrics.jsonl: every series, the resumed steps once, the settings as text.
func TestTensorBoardMatchesMetrics(t *testing.T) {
	dir := t.TempDir()
	run := filepath.Join(dir, "run")
	corpusFile := writeCorpus(t, dir, "corpus.txt", 40_000)
	common := []string{"--log-every", "5", "--eval-every", "10", "--eval-tokens", "2048", "--no-progress"}
	mustRun(t, append([]string{"train", "--preset", "tiny", "--steps", "20", "--checkpoint-every", "10",
		"--corpus", corpusFile, "--out", run}, common...)...)
	// The run resumes from step 10: what it logged after that is replaced.
	if err := os.RemoveAll(filepath.Join(run, "checkpoints", "step-00000020")); err != nil {
		t.Fatal(err)
	}
	mustRun(t, append([]string{"train", "--resume", run, "--steps", "25"}, common...)...)
	got := checkSameSeries(t, run, "loss", "loss_last", "val_loss", "lr", "grad_norm", "tokens_per_s", "peak_memory_bytes")
	if steps := got.Scalars["loss"]; len(steps) != 5 || steps[4][0] != 25 {
		t.Errorf("loss logged at %v, want steps 5, 10, 15, 20, 25 once each", steps)
	}
	if cfg := got.Text["config"]; len(cfg) != 2 || !strings.Contains(cfg[0][1].(string), `"d_model": 64`) {
		t.Errorf("settings text %v, want the config at the start and at the resume", cfg)
	}

	ft := filepath.Join(dir, "lora")
	mustRun(t, "finetune", "--from", run, "--data", writeRecords(t, dir, "train.jsonl", 24),
		"--valid", writeRecords(t, dir, "valid.jsonl", 4), "--out", ft, "--steps", "6", "--log-every", "3",
		"--eval-every", "3", "--no-progress")
	got = checkSameSeries(t, ft, "loss", "loss_last", "counted_tokens", "val_loss", "lr")
	if fc := got.Text["finetune"]; len(fc) != 1 || !strings.Contains(fc[0][1].(string), `"method": "lora"`) {
		t.Errorf("fine-tune settings text %v, want finetune.json's", fc)
	}
}
