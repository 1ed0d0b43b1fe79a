package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"image/png"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/posttrainllm/posttrainllm/checkpoint"
	"github.com/posttrainllm/posttrainllm/presets"
	"github.com/posttrainllm/posttrainllm/train"
)

// binary is the posttrainllm built once for all tests; cacheDir holds the
// token cache the runs share.
var binary, cacheDir string

// shakespeare is the corpus the acceptance run uses.
const shakespeare = "../../../shared/data/tinyshakespeare.txt"

func TestMain(m *testing.M) {
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "posttrainllm-cmd-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	binary = filepath.Join(dir, "posttrainllm")
	cacheDir = filepath.Join(dir, "cache")
	build := exec.Command("go", "build", "-o", binary, ".")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building posttrainllm:", err)
		return 1
	}
	return m.Run()
}

// result is one finished command.
type result struct {
	code           int
	stdout, stderr string
}

// command prepares the binary with args, its token cache in the test's
// cache directory.
func command(args ...string) *exec.Cmd {
	cmd := exec.Command(binary, args...)
	cmd.Env = append(os.Environ(), "XDG_CACHE_HOME="+cacheDir)
	return cmd
}

// runCLI runs the binary to completion.
func runCLI(t *testing.T, args ...string) result {
	t.Helper()
	cmd := command(args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := result{stdout: stdout.String(), stderr: stderr.String()}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	case err != nil:
		t.Fatalf("running posttrainllm %s: %v", strings.Join(args, " "), err)
	}
	return r
}

// mustRun runs the binary and fails the test unless it exits 0.
func mustRun(t *testing.T, args ...string) result {
	t.Helper()
	r := runCLI(t, args...)
	if r.code != 0 {
		t.Fatalf("posttrainllm %s exited %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
	}
	return r
}

func corpus(t *testing.T) string {
	t.Helper()
	if _, err := os.Stat(shakespeare); err != nil {
		t.Fatalf("the acceptance corpus is missing: %v", err)
	}
	return shakespeare
}

func readMetrics(t *testing.T, dir string) []train.Metrics {
	t.Helper()
	ms, err := train.ReadMetrics(filepath.Join(dir, train.MetricsFile))
	if err != nil {
		t.Fatal(err)
	}
	return ms
}

// The acceptance run: 200 tiny steps on Shakespeare write metrics
// whose loss falls far, a checkpoint and loss.png; --resume continues from
// the last step; sample generates from the run.
func TestTrainTinyResumeAndSample(t *testing.T) {
	out := filepath.Join(t.TempDir(), "run")
	r := mustRun(t, "train", "--preset", "tiny", "--steps", "200", "--corpus", corpus(t), "--out", out)
	if !strings.Contains(r.stdout, "tinyshakespeare.txt") {
		t.Fatalf("train does not say which corpus it uses:\n%s", r.stdout)
	}
	ms := readMetrics(t, out)
	var losses []train.Metrics
	for _, m := range ms {
		if m.Step > 0 {
			losses = append(losses, m)
		}
	}
	first, last := losses[0], losses[len(losses)-1]
	if last.Step != 200 {
		t.Fatalf("last metrics line is step %d, want 200", last.Step)
	}
	if !(last.Loss < first.Loss-1.5) {
		t.Fatalf("loss went from %.3f (step %d) to %.3f (step 200), want it far lower", first.Loss, first.Step, last.Loss)
	}
	ck, err := checkpoint.Latest(out)
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Base(ck) != "step-00000200" {
		t.Fatalf("newest checkpoint %s, want step-00000200", ck)
	}
	if _, err := train.ReadRunState(filepath.Join(ck, checkpoint.StateFile)); err != nil {
		t.Fatal(err)
	}
	checkPNG(t, filepath.Join(out, plotFile))

	// --resume continues from step 200 to 230 with the checkpoint's settings.
	r = mustRun(t, "train", "--resume", out, "--steps", "230", "--no-progress")
	if !strings.Contains(r.stdout, "resuming at step 200") {
		t.Fatalf("resume does not say where it starts:\n%s", r.stdout)
	}
	ms = readMetrics(t, out)
	prev := -1
	for _, m := range ms {
		if m.Step <= prev {
			t.Fatalf("metrics steps not increasing after resume: %d after %d", m.Step, prev)
		}
		prev = m.Step
	}
	if prev != 230 {
		t.Fatalf("resumed run ended at step %d, want 230", prev)
	}
	if ck, _ := checkpoint.Latest(out); filepath.Base(ck) != "step-00000230" {
		t.Fatalf("newest checkpoint after resume %s, want step-00000230", ck)
	}

	// A finished run is not trained again by accident.
	r = runCLI(t, "train", "--preset", "tiny", "--corpus", corpus(t), "--out", out)
	if r.code == 0 || !strings.Contains(r.stderr, "--resume") || !strings.Contains(r.stderr, "--overwrite") {
		t.Fatalf("training into a run folder without --resume: exit %d, stderr %q", r.code, r.stderr)
	}
	// A checkpoint cannot be resumed into another model.
	r = runCLI(t, "train", "--resume", out, "--d-model", "32", "--steps", "300")
	if r.code == 0 || !strings.Contains(r.stderr, "another model shape") || !strings.Contains(r.stderr, "32") {
		t.Fatalf("resume with another d_model: exit %d, stderr %q", r.code, r.stderr)
	}

	r = mustRun(t, "sample", "--from", out, "--prompt", "ROMEO:", "--tokens", "40", "--seed", "3")
	if !strings.HasPrefix(r.stdout, "ROMEO:") || len(r.stdout) < len("ROMEO:")+20 {
		t.Fatalf("sample printed %q, want the prompt and its continuation", r.stdout)
	}
	// A run computes in its own dtype: --dtype is for a model folder.
	r = runCLI(t, "sample", "--from", out, "--dtype", "bfloat16")
	if r.code != 2 {
		t.Fatalf("sample of a run with --dtype: exit %d, want 2", r.code)
	}
	checkErrorLine(t, "sample of a run with --dtype", r.stderr, "--dtype bfloat16 with a run")
}

// The smoke test everyone types, train --preset tiny --steps 2, runs: the
// preset's 20 warm-up steps shrink to fit, the header says so, and the
// checkpoint records the warm-up used.
func TestTwoStepRunShrinksWarmup(t *testing.T) {
	out := filepath.Join(t.TempDir(), "run")
	r := mustRun(t, "train", "--preset", "tiny", "--steps", "2", "--out", out, "--no-progress")
	if !strings.Contains(r.stdout, "warmup 1 (the preset tiny's 20 warm-up steps do not fit 2 steps; --warmup sets it)") {
		t.Fatalf("the header does not say the warm-up was shortened:\n%s", r.stdout)
	}
	ck, err := checkpoint.Latest(out)
	if err != nil {
		t.Fatal(err)
	}
	st, err := train.ReadRunState(filepath.Join(ck, checkpoint.StateFile))
	if err != nil {
		t.Fatal(err)
	}
	if st.Step != 2 || st.Config.Warmup != 1 || st.Config.Steps != 2 {
		t.Fatalf("checkpoint at step %d with warmup %d of %d steps, want step 2, warmup 1 of 2", st.Step, st.Config.Warmup, st.Config.Steps)
	}
	// A warm-up the user sets is kept, and it fits.
	r = mustRun(t, "train", "--preset", "tiny", "--steps", "3", "--warmup", "2", "--out", out, "--overwrite", "--no-progress")
	if strings.Contains(r.stdout, "warm-up steps do not fit") {
		t.Fatalf("a warm-up set by --warmup was changed:\n%s", r.stdout)
	}
}

func checkPNG(t *testing.T, path string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if b := img.Bounds(); b.Dx() < 100 || b.Dy() < 100 {
		t.Fatalf("%s is %v", path, b)
	}
}

// The bench check: a cosine schedule with accum 4 traces once.
func TestBenchJSONTracesOnce(t *testing.T) {
	r := mustRun(t, "bench", "--preset", "tiny", "--schedule", "cosine", "--accum", "4", "--steps", "30", "--json")
	var got map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
		t.Fatalf("bench --json printed no JSON object: %v\n%s", err, r.stdout)
	}
	for _, key := range []string{"preset", "device", "compile", "schedule", "accum", "batch", "context", "params",
		"steps", "ms_per_step_median", "ms_per_step_p10", "ms_per_step_p90", "steps_per_s", "tokens_per_s",
		"traces", "host_ms_per_step", "device_ms_per_step", "peak_memory_bytes", "loss_first", "loss_last", "graph_ops"} {
		if _, ok := got[key]; !ok {
			t.Errorf("bench JSON lacks %q", key)
		}
	}
	if got["compile"] != true || got["traces"] != 1.0 || got["accum"] != 4.0 || got["steps"] != 30.0 ||
		got["schedule"] != "cosine" || got["preset"] != "tiny" {
		t.Fatalf("bench JSON %v, want compile true, traces 1, accum 4, steps 30", got)
	}
}

// TestBenchCompareRounds restricts the comparison to cosine × accum 4 and
// runs it twice: four results alternating compiled and interpreted, each
// with the preset's tokens per update (tiny: batch 8 × accum 1, so accum 4
// runs batch 2), and a ratio table with its range.
func TestBenchCompareRounds(t *testing.T) {
	r := mustRun(t, "bench", "--preset", "tiny", "--compare", "--schedule", "cosine", "--accum", "4", "--rounds", "2",
		"--steps", "2", "--warmup-steps", "1", "--json")
	var got []map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
		t.Fatalf("bench --compare --json printed no JSON array: %v\n%s", err, r.stdout)
	}
	if len(got) != 4 {
		t.Fatalf("%d results, want 4", len(got))
	}
	for i, g := range got {
		if g["round"] != float64(i/2+1) || g["compile"] != (i%2 == 0) || g["accum"] != 4.0 || g["batch"] != 2.0 ||
			g["schedule"] != "cosine" || g["tokens_per_step"] != 512.0 {
			t.Fatalf("result %d: %v", i, g)
		}
	}
	table := mustRun(t, "bench", "--preset", "tiny", "--compare", "--schedule", "cosine", "--accum", "4", "--rounds", "2",
		"--steps", "2", "--warmup-steps", "1")
	if !strings.Contains(table.stdout, "interpreted/compiled") || !strings.Contains(table.stdout, "range") {
		t.Fatalf("no ratio table in\n%s", table.stdout)
	}
}

func TestPresetsTable(t *testing.T) {
	r := mustRun(t, "presets")
	lines := strings.Split(r.stdout, "\n")
	var huge []string
	for _, l := range lines {
		f := strings.Fields(l)
		if len(f) > 0 && f[0] == "huge" {
			huge = f
		}
	}
	if len(huge) < 11 {
		t.Fatalf("no huge row in\n%s", r.stdout)
	}
	// preset layers d_model heads context tokenizer vocab params batch accum tokens/step
	if huge[1] != "12" || huge[2] != "256" || huge[4] != "512" || huge[7] != "22.3M" || huge[8] != "4" || huge[9] != "4" {
		t.Fatalf("huge row %v, want 12 layers, d_model 256, context 512, 22.3M params, batch 4 × accum 4", huge)
	}
	for _, name := range presets.Names() {
		if !strings.Contains(r.stdout, name) {
			t.Fatalf("presets table lacks %s", name)
		}
	}
}

func TestVersion(t *testing.T) {
	r := mustRun(t, "version")
	for _, want := range []string{"posttrainllm dev", "go1.", mlxVersion, "linux/"} {
		if !strings.Contains(r.stdout, want) {
			t.Fatalf("version output lacks %q:\n%s", want, r.stdout)
		}
	}
}

func TestHelpHasExamples(t *testing.T) {
	for _, sub := range []string{"train", "bench", "sample", "eval", "presets", "version"} {
		r := mustRun(t, sub, "--help")
		if !strings.Contains(r.stdout, "Examples:") || !strings.Contains(r.stdout, "posttrainllm "+sub) {
			t.Fatalf("%s --help has no examples:\n%s", sub, r.stdout)
		}
	}
}

// Invalid input exits non-zero, names the bad value, and creates nothing.
func TestBadInputCreatesNothing(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "run")
	file := filepath.Join(dir, "file.txt")
	if err := os.WriteFile(file, []byte("not a folder"), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		args []string
		want []string // in stderr
	}{
		{[]string{"train", "--preset", "gigantic", "--out", out}, []string{"--preset", "gigantic", "tiny"}},
		{[]string{"train", "--steps", "0", "--out", out}, []string{"--steps 0", "want >= 1"}},
		{[]string{"train", "--lr", "-1", "--out", out}, []string{"--lr -1", "want"}},
		{[]string{"train", "--corpus", filepath.Join(dir, "missing.txt"), "--out", out}, []string{"--corpus", "missing.txt"}},
		{[]string{"train", "--out", file}, []string{"--out", file, "file"}},
		{[]string{"train", "--out", filepath.Join(file, "sub")}, []string{"--out", "file.txt"}},
		{[]string{"train", "--heads", "3", "--out", out}, []string{"--heads 3", "divisible"}},
		{[]string{"train", "--optimizer", "adam", "--out", out}, []string{"--optimizer adam", "adamw"}},
		{[]string{"train", "--device", "tpu", "--out", out}, []string{"--device tpu", "cpu or gpu"}},
		{[]string{"train", "--resume", filepath.Join(dir, "nope")}, []string{"--resume", "nope"}},
		{[]string{"train", "--steps", "many", "--out", out}, []string{"many", "--steps"}},
		{[]string{"bench", "--steps", "0"}, []string{"--steps 0"}},
		{[]string{"bench", "--compare", "--compile=false"}, []string{"--compile false", "--compare"}},
		{[]string{"bench", "--rounds", "3"}, []string{"--rounds 3", "--compare"}},
		{[]string{"bench", "--compare", "--rounds", "0"}, []string{"--rounds 0", "want >= 1"}},
		{[]string{"sample", "--from", filepath.Join(dir, "nope")}, []string{"--from", "nope"}},
		{[]string{"sample", "--from", dir, "--tokens", "0"}, []string{"--tokens 0"}},
	}
	for _, c := range cases {
		r := runCLI(t, c.args...)
		if r.code == 0 {
			t.Errorf("%v: exit 0, want an error", c.args)
			continue
		}
		checkErrorLine(t, fmt.Sprint(c.args), r.stderr, c.want...)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Name() != "file.txt" {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Fatalf("invalid commands left %v in the test folder, want only file.txt", names)
	}
	if b, _ := os.ReadFile(file); string(b) != "not a folder" {
		t.Fatalf("--out FILE changed the file: %q", b)
	}
}

// SIGINT during training finishes the step, writes a checkpoint and exits
// 130; the checkpoint resumes.
func TestInterruptCheckpointsAndExits130(t *testing.T) {
	out := filepath.Join(t.TempDir(), "run")
	cmd := command("train", "--preset", "tiny", "--steps", "300", "--log-every", "1",
		"--corpus", corpus(t), "--out", out, "--no-progress")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	text, err := runInterruptedAtStep3(t, cmd)
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != exitSIGINT {
		t.Fatalf("interrupted train: %v, want exit %d\nstdout:\n%s\nstderr:\n%s", err, exitSIGINT, text, stderr.String())
	}
	ck, err := checkpoint.Latest(out)
	if err != nil {
		t.Fatalf("no checkpoint after SIGINT: %v\n%s", err, text)
	}
	if !strings.Contains(text, ck) || !strings.Contains(text, "--resume "+out) {
		t.Fatalf("interrupted train does not say where its checkpoint is:\n%s", text)
	}
	st, err := train.ReadRunState(filepath.Join(ck, checkpoint.StateFile))
	if err != nil || st.Step < 3 || st.Step >= 300 {
		t.Fatalf("checkpoint at step %d (%v), want one taken at the interrupt", st.Step, err)
	}
}

// A diverging run stops with a clear message and exit status 1.
func TestDivergenceExits1(t *testing.T) {
	out := filepath.Join(t.TempDir(), "run")
	start := time.Now()
	r := runCLI(t, "train", "--preset", "tiny", "--optimizer", "sgd", "--lr", "1e30", "--schedule", "constant",
		"--warmup", "0", "--grad-clip", "0", "--steps", "20", "--log-every", "1", "--corpus", corpus(t), "--out", out, "--no-progress")
	if r.code != 1 || !strings.Contains(r.stderr, "diverged") || !strings.Contains(r.stderr, "not finite") {
		t.Fatalf("diverging run: exit %d after %v, stderr %q", r.code, time.Since(start), r.stderr)
	}
}

// runInterruptedAtStep3 starts cmd, sends it SIGINT once its output
// reaches "step 3/", and returns all it printed and its exit error.
func runInterruptedAtStep3(t *testing.T, cmd *exec.Cmd) (string, error) {
	t.Helper()
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var text strings.Builder
	sc := bufio.NewScanner(stdout)
	signalled := false
	for sc.Scan() {
		text.WriteString(sc.Text() + "\n")
		if !signalled && strings.HasPrefix(sc.Text(), "step 3/") {
			if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
				t.Fatal(err)
			}
			signalled = true
		}
	}
	io.Copy(io.Discard, stdout)
	return text.String(), cmd.Wait()
}
