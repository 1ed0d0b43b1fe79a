package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/posttrainllm/posttrainllm/generate"
	"github.com/posttrainllm/posttrainllm/internal/realmodel"
	"github.com/posttrainllm/posttrainllm/mlx"
)

// capitalsTask is a multiple-choice task lm-eval reads from a local jsonl:
// the capital of each country among four cities.
var capitals = [][2]string{{"France", "Paris"}, {"Germany", "Berlin"}, {"Italy", "Rome"}, {"Spain", "Madrid"},
	{"Japan", "Tokyo"}, {"Egypt", "Cairo"}, {"Canada", "Ottawa"}, {"Russia", "Moscow"}, {"China", "Beijing"},
	{"Greece", "Athens"}, {"Portugal", "Lisbon"}, {"Austria", "Vienna"}}

type choiceDoc struct {
	Question string   `json:"question"`
	Choices  []string `json:"choices"`
	Label    int      `json:"label"`
}

// writeCapitalsTask writes the task's jsonl and YAML into dir and returns
// its documents.
func writeCapitalsTask(t *testing.T, dir string) []choiceDoc {
	t.Helper()
	var docs []choiceDoc
	var lines strings.Builder
	for i, c := range capitals {
		choices := []string{capitals[(i+1)%len(capitals)][1], capitals[(i+5)%len(capitals)][1], capitals[(i+7)%len(capitals)][1]}
		label := i % 4
		choices = append(choices[:label], append([]string{c[1]}, choices[label:]...)...)
		d := choiceDoc{Question: "The capital of " + c[0] + " is", Choices: choices, Label: label}
		docs = append(docs, d)
		b, _ := json.Marshal(d)
		lines.Write(append(b, '\n'))
	}
	data := filepath.Join(dir, "capitals.jsonl")
	yaml := fmt.Sprintf(`task: capitals
dataset_path: json
dataset_kwargs:
  data_files:
    test: %s
test_split: test
output_type: multiple_choice
doc_to_text: "{{question}}"
doc_to_choice: "{{choices}}"
doc_to_target: label
target_delimiter: " "
metric_list:
  - metric: acc
`, data)
	for name, text := range map[string]string{data: lines.String(), filepath.Join(dir, "capitals.yaml"): yaml} {
		if err := os.WriteFile(name, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return docs
}

// lm-eval's local-completions model scores a multiple-choice task through
// posttrainllm serve (token-id prompts, echo and logprobs): every choice's
// log-likelihood matches the one computed directly from one forward pass
// of the same folder over the same tokens, and so does the accuracy.
func TestLMEvalAgainstServe(t *testing.T) {
	lmEval, err := filepath.Abs(filepath.Join("..", "..", ".deps", "lmeval", "bin", "lm_eval"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(lmEval); err != nil {
		t.Fatalf("the lm-eval test needs %s: run `make lmeval-deps`", lmEval)
	}
	folder := realmodel.Folder(t)
	dir := t.TempDir()
	docs := writeCapitalsTask(t, dir)
	url := startServe(t, "--from", folder, "--model", "smol", "--max-batch", "4")
	cmd := exec.Command(lmEval, "--model", "local-completions",
		"--model_args", "model=smol,base_url="+url+"/v1/completions,tokenizer_backend=huggingface,tokenizer="+folder+",max_retries=1,num_concurrent=4",
		"--tasks", "capitals", "--include_path", dir, "--output_path", filepath.Join(dir, "out"), "--log_samples")
	cmd.Env = append(os.Environ(), "HF_DATASETS_OFFLINE=1", "HF_HUB_OFFLINE=1", "TOKENIZERS_PARALLELISM=false")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("lm_eval: %v\n%s", err, out)
	}
	samples, err := filepath.Glob(filepath.Join(dir, "out", "smol", "samples_capitals_*.jsonl"))
	if err != nil || len(samples) != 1 {
		t.Fatalf("lm_eval wrote samples %v (%v):\n%s", samples, err, out)
	}
	served := readLoglikelihoods(t, samples[0])

	m, err := generate.OpenFolder(folder, "", folderTokenizer)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	correctServed, correctDirect := 0, 0
	for i, d := range docs {
		if len(served[i]) != len(d.Choices) {
			t.Fatalf("document %d: lm-eval scored %d choices, want %d", i, len(served[i]), len(d.Choices))
		}
		best, bestServed := 0, 0
		direct := make([]float64, len(d.Choices))
		for c, choice := range d.Choices {
			direct[c] = continuationLogprob(t, m, d.Question, " "+choice)
			if math.Abs(direct[c]-served[i][c]) > 2e-3 {
				t.Fatalf("document %d choice %q: lm-eval through serve %.5f, one forward pass %.5f", i, choice, served[i][c], direct[c])
			}
			if direct[c] > direct[best] {
				best = c
			}
			if served[i][c] > served[i][bestServed] {
				bestServed = c
			}
		}
		if best == d.Label {
			correctDirect++
		}
		if bestServed == d.Label {
			correctServed++
		}
	}
	results, err := filepath.Glob(filepath.Join(dir, "out", "smol", "results_*.json"))
	if err != nil || len(results) != 1 {
		t.Fatalf("lm_eval wrote results %v (%v)", results, err)
	}
	raw, err := os.ReadFile(results[0])
	if err != nil {
		t.Fatal(err)
	}
	var res struct {
		Results map[string]map[string]any `json:"results"`
	}
	if err := json.Unmarshal(raw, &res); err != nil {
		t.Fatal(err)
	}
	acc, ok := res.Results["capitals"]["acc,none"].(float64)
	if !ok || correctServed != correctDirect || math.Abs(acc-float64(correctDirect)/float64(len(docs))) > 1e-9 {
		t.Fatalf("accuracy: lm-eval reports %v (%d/%d from its samples), direct %d/%d", res.Results["capitals"], correctServed, len(docs), correctDirect, len(docs))
	}
	t.Logf("capitals: %d/%d through lm-eval and serve, %d/%d directly", correctServed, len(docs), correctDirect, len(docs))
}

// readLoglikelihoods reads each document's choices' log-likelihoods from
// lm-eval's samples file.
func readLoglikelihoods(t *testing.T, path string) [][]float64 {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out [][]float64
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var s struct {
			DocID int       `json:"doc_id"`
			Resps [][][]any `json:"resps"`
		}
		if err := json.Unmarshal(sc.Bytes(), &s); err != nil {
			t.Fatal(err)
		}
		for len(out) <= s.DocID {
			out = append(out, nil)
		}
		for _, r := range s.Resps {
			text, _ := r[0][0].(string)
			v, err := strconv.ParseFloat(text, 64)
			if err != nil {
				t.Fatalf("samples: %v", err)
			}
			out[s.DocID] = append(out[s.DocID], v)
		}
	}
	return out
}

// continuationLogprob is log p(continuation | context) from the logits of
// one forward pass over the two, the continuation's tokens split off as
// lm-eval does: the tokens of context+continuation past those of context.
func continuationLogprob(t *testing.T, m *generate.Model, context, continuation string) float64 {
	t.Helper()
	ctx := m.Tokenizer.Encode(context)
	whole := m.Tokenizer.Encode(context + continuation)
	logits := mlx.AsType(m.Net.Logits(m.Params, mlx.FromSlice(whole, 1, len(whole))), mlx.Float32)
	host, err := logits.Float32s()
	if err != nil {
		t.Fatal(err)
	}
	V, vocab := logits.Dim(2), m.Net.Config.VocabSize
	sum := 0.0
	for pos := len(ctx); pos < len(whole); pos++ {
		row := host[(pos-1)*V : (pos-1)*V+vocab]
		mx := math.Inf(-1)
		for _, v := range row {
			mx = math.Max(mx, float64(v))
		}
		z := 0.0
		for _, v := range row {
			z += math.Exp(float64(v) - mx)
		}
		sum += float64(row[whole[pos]]) - mx - math.Log(z)
	}
	return sum
}
