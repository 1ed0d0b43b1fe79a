package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/posttrainllm/posttrainllm/checkpoint"
	"github.com/posttrainllm/posttrainllm/data"
	"github.com/posttrainllm/posttrainllm/train"
)

// TestTokenizeTrainEvalFromShards writes shards with tokenize, trains on
// them with --data, resumes, and evaluates the checkpoint on the held-out
// shard.
func TestTokenizeTrainEvalFromShards(t *testing.T) {
	dir := t.TempDir()
	text := writeCorpus(t, dir, "corpus.txt", 30000)
	jsonl := filepath.Join(dir, "docs.jsonl")
	if err := os.WriteFile(jsonl, []byte("{\"text\":\"first document\"}\n{\"text\":\"second\"}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	prefix := filepath.Join(dir, "c")
	r := mustRun(t, "tokenize", "--tokenizer", "byte", "--val-tokens", "3000", "--shard-tokens", "10000", "--out", prefix, jsonl, text)
	// 2 jsonl documents (14 + 6 bytes) and one text file, each after an EOT.
	total := 30000 + 1 + 14 + 1 + 6 + 1
	if !strings.Contains(r.stdout, "3 documents") || !strings.Contains(r.stdout, "in 4 shards") {
		t.Fatalf("tokenize output does not report 3 documents in 4 shards:\n%s", r.stdout)
	}
	paths, err := data.ShardPaths(filepath.Join(dir, "c_*.bin"))
	if err != nil {
		t.Fatal(err)
	}
	all, err := data.OpenShards(paths, 256)
	if err != nil {
		t.Fatal(err)
	}
	if all.Len() < total || all.Len() > total+8 { // the corpus writer may end a word past 30000
		t.Errorf("shards hold %d tokens, want about %d", all.Len(), total)
	}
	all.Close()

	run := filepath.Join(dir, "run")
	r = mustRun(t, "train", "--preset", "tiny", "--tokenizer", "byte", "--steps", "2", "--no-progress",
		"--data", prefix+"_train_*.bin", "--val-data", prefix+"_val_*.bin", "--out", run)
	if !strings.Contains(r.stdout, "3 training shards") || !strings.Contains(r.stdout, "3000 held out") {
		t.Fatalf("train does not say it trains on 3 shards with 3000 tokens held out:\n%s", r.stdout)
	}
	r = mustRun(t, "train", "--resume", run, "--steps", "3", "--no-progress")
	ck, err := checkpoint.Latest(run)
	if err != nil {
		t.Fatal(err)
	}
	st, err := train.ReadRunState(filepath.Join(ck, checkpoint.StateFile))
	if err != nil {
		t.Fatal(err)
	}
	if st.Step != 3 || !filepath.IsAbs(st.Config.Data) || st.Config.Corpus != "" {
		t.Fatalf("checkpoint at step %d with data %q corpus %q, want step 3, an absolute data pattern and no corpus", st.Step, st.Config.Data, st.Config.Corpus)
	}
	r = mustRun(t, "eval", "--from", run)
	if !strings.Contains(r.stdout, "c_val_*.bin") || !strings.Contains(r.stdout, "3000") {
		t.Fatalf("eval does not evaluate the 3000 held-out tokens of c_val_*.bin:\n%s", r.stdout)
	}
}

func TestTokenizeBadInput(t *testing.T) {
	dir := t.TempDir()
	text := writeCorpus(t, dir, "corpus.txt", 2000)
	prefix := filepath.Join(dir, "c")
	mustRun(t, "tokenize", "--tokenizer", "byte", "--out", prefix, text)
	bad := filepath.Join(dir, "bad.jsonl")
	if err := os.WriteFile(bad, []byte("{\"text\":\"a\"}\n{\"body\":\"b\"}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"tokenize", text}, []string{"--out is required"}},
		{[]string{"tokenize", "--out", prefix, text}, []string{"c_train_000000.bin exists already"}},
		{[]string{"tokenize", "--out", filepath.Join(dir, "d"), filepath.Join(dir, "missing.txt")}, []string{"missing.txt", "no such file"}},
		{[]string{"tokenize", "--tokenizer", "nope", "--out", filepath.Join(dir, "d"), text}, []string{"--tokenizer nope"}},
		{[]string{"tokenize", "--shard-tokens", "0", "--out", filepath.Join(dir, "d"), text}, []string{"shard size 0"}},
		{[]string{"tokenize", "--out", filepath.Join(dir, "d"), bad}, []string{"bad.jsonl", "line 2", `no "text" field`}},
		{[]string{"train", "--preset", "tiny", "--tokenizer", "byte", "--data", filepath.Join(dir, "none_*.bin"), "--out", filepath.Join(dir, "run")},
			[]string{"--data", "no files match"}},
		{[]string{"train", "--preset", "tiny", "--tokenizer", "byte", "--data", prefix + "_train_*.bin", "--corpus", text, "--out", filepath.Join(dir, "run")},
			[]string{"want one source of training text"}},
	} {
		before := treeDigest(t, dir)
		r := runCLI(t, tc.args...)
		checkCleanFailure(t, strings.Join(tc.args, " "), r, tc.want...)
		if diff := sameDigest(before, treeDigest(t, dir)); diff != "" && !strings.Contains(diff, filepath.Join(dir, "d_")) {
			t.Errorf("%s changed files: %s", strings.Join(tc.args, " "), diff)
		}
	}
}

// A GaLore run resumes with its rank; another rank is refused before
// anything is written.
func TestResumeKeepsGaLoreRank(t *testing.T) {
	dir := t.TempDir()
	text := writeCorpus(t, dir, "corpus.txt", 20000)
	run := filepath.Join(dir, "run")
	mustRun(t, "train", "--preset", "tiny", "--corpus", text, "--optimizer", "galore", "--galore-rank", "16",
		"--galore-gap", "2", "--steps", "2", "--no-progress", "--out", run)
	before := treeDigest(t, dir)
	r := runCLI(t, "train", "--resume", run, "--steps", "4", "--galore-rank", "8", "--no-progress")
	checkCleanFailure(t, "resume with another galore rank", r, "--galore-rank 8", "a resumed run keeps it")
	if diff := sameDigest(before, treeDigest(t, dir)); diff != "" {
		t.Errorf("the refused resume changed files: %s", diff)
	}
	mustRun(t, "train", "--resume", run, "--steps", "4", "--no-progress")
	r = runCLI(t, "train", "--preset", "tiny", "--corpus", text, "--optimizer", "galore", "--steps", "2", "--out", filepath.Join(dir, "r2"))
	checkCleanFailure(t, "galore rank above d_model", r, "galore_rank = 128 is above")
}
