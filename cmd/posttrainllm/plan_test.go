package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
)

// A --micro-batch that is not auto or a positive number dividing batch ×
// accum, or a --memory-budget that is neither bytes nor a fraction, is a
// usage error naming the flag and the value, in train and bench alike.
func TestBadMicroBatchAndBudgetFlags(t *testing.T) {
	shape := []string{"--batch", "2", "--accum", "2", "--steps", "2"}
	for _, c := range []struct {
		flag, value string
		want        string
	}{
		{"--micro-batch", "0", `invalid argument "0" for "--micro-batch" flag: want auto or a number of sequences >= 1`},
		{"--micro-batch", "-4", `invalid argument "-4" for "--micro-batch" flag`},
		{"--micro-batch", "two", `invalid argument "two" for "--micro-batch" flag`},
		{"--micro-batch", "1.5", `invalid argument "1.5" for "--micro-batch" flag`},
		{"--micro-batch", "3", "invalid --micro-batch 3: want a divisor of batch × accum = 2 × 2 = 4 (1, 2, 4)"},
		{"--memory-budget", "8XB", "invalid --memory-budget 8XB: want bytes with a unit"},
		{"--memory-budget", "1.5", "invalid --memory-budget 1.5: want bytes with a unit (8GiB, 512MiB, 80GB) or a fraction of the device's memory in (0, 1]"},
	} {
		for _, cmd := range []string{"train", "bench"} {
			argv := append([]string{cmd}, shape...)
			if cmd == "train" {
				argv = append(argv, "--out", filepath.Join(t.TempDir(), "run"))
			}
			r := runCLI(t, append(argv, c.flag, c.value)...)
			if r.code != exitUsage || !strings.Contains(r.stderr, c.want) {
				t.Errorf("%s %s %s: exit %d, stderr %q; want exit %d and %q", cmd, c.flag, c.value, r.code, r.stderr, exitUsage, c.want)
			}
		}
	}
}

// bench --json reports the plan the step ran: the static plan of the CPU
// by default, a set micro-batch otherwise, with the memory budget in force.
func TestBenchJSONReportsPlan(t *testing.T) {
	base := []string{"bench", "--d-model", "16", "--layers", "1", "--heads", "2", "--context", "16",
		"--batch", "2", "--accum", "4", "--steps", "1", "--warmup-steps", "0", "--json"}
	for _, c := range []struct {
		extra       []string
		micro, accs float64
		how         string
	}{
		{nil, 2, 4, "static"},
		{[]string{"--micro-batch", "8"}, 8, 1, "forced"},
		{[]string{"--micro-batch", "4", "--memory-budget", "2GiB"}, 4, 2, "forced"},
	} {
		r := mustRun(t, append(base, c.extra...)...)
		var got map[string]any
		if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
			t.Fatalf("bench --json printed no JSON object: %v\n%s", err, r.stdout)
		}
		if got["micro_batch"] != c.micro || got["accum_steps"] != c.accs || got["plan"] != c.how ||
			got["batch"] != 2.0 || got["accum"] != 4.0 || got["tokens_per_step"] != 128.0 {
			t.Errorf("%v: JSON %v; want micro_batch %g × accum_steps %g (%s) for batch 2 × accum 4", c.extra, got, c.micro, c.accs, c.how)
		}
		if b, ok := got["memory_budget_bytes"].(float64); !ok || b <= 0 {
			t.Errorf("%v: memory_budget_bytes %v, want the budget in force", c.extra, got["memory_budget_bytes"])
		}
		if c.extra != nil && c.extra[len(c.extra)-1] == "2GiB" && got["memory_budget_bytes"] != float64(2<<30) {
			t.Errorf("--memory-budget 2GiB: memory_budget_bytes %v", got["memory_budget_bytes"])
		}
	}
}

// train's header says the plan, and every metrics line the plan its
// update ran.
func TestTrainReportsPlan(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "run")
	r := mustRun(t, joinArgs([]string{"train", "--steps", "3", "--corpus", writeCorpus(t, dir, "c.txt", 20_000),
		"--out", out, "--log-every", "1"}, smallModel, []string{"--accum", "2", "--micro-batch", "4"})...)
	if !strings.Contains(r.stdout, "plan: micro-batch 4 × 1 accumulation step (forced)") {
		t.Errorf("train's output does not state the plan:\n%s", r.stdout)
	}
	for _, m := range readMetrics(t, out) {
		if m.MicroBatch != 4 || m.AccumSteps != 1 {
			t.Errorf("metrics of step %d say micro-batch %d × %d steps, want 4 × 1", m.Step, m.MicroBatch, m.AccumSteps)
		}
	}
}
