package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"math"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/posttrainllm/posttrainllm/checkpoint"
	"github.com/posttrainllm/posttrainllm/internal/mlxtest"
	"github.com/posttrainllm/posttrainllm/mlx"
	"github.com/posttrainllm/posttrainllm/train"
)

// checkpointParams reads the parameters of run folder dir's newest
// checkpoint, by name, and its step.
func checkpointParams(t *testing.T, dir string) (map[string][]float32, int) {
	t.Helper()
	ck, err := checkpoint.Latest(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]float32{}
	var step int
	mlxtest.Run(t, func(t testing.TB) {
		c, err := train.LoadCheckpoint(ck)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Free()
		step = c.State.Step
		for name, a := range c.Params {
			f, err := mlx.AsType(a, mlx.Float32).Float32s()
			if err != nil {
				t.Fatal(err)
			}
			out[name] = f
		}
	})
	return out, step
}

// sameParams fails the test unless two checkpoints' parameters agree to a
// float tolerance (the sums run in another order across ranks).
func sameParams(t *testing.T, what string, got, want map[string][]float32) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d parameters, want %d", what, len(got), len(want))
	}
	for name, w := range want {
		g := got[name]
		if len(g) != len(w) {
			t.Fatalf("%s: %q has %d elements, want %d", what, name, len(g), len(w))
		}
		for i := range w {
			if d := math.Abs(float64(g[i] - w[i])); d > 2e-5 {
				t.Fatalf("%s: %q[%d] = %g, the single process's %g (difference %g)", what, name, i, g[i], w[i], d)
			}
		}
	}
}

// train --nproc 2 --batch 4 updates the parameters as one process with
// --batch 8 does, writes one metrics line per step (rank 0 alone writes),
// and a resumed --nproc 2 run continues both ranks' streams: it matches
// the single process resumed too.
func TestNprocMatchesDoubledBatch(t *testing.T) {
	dir := t.TempDir()
	common := []string{"train", "--preset", "tiny", "--steps", "6", "--warmup", "2", "--log-every", "1",
		"--eval-every", "3", "--corpus", corpus(t), "--no-progress"}
	single, dp := filepath.Join(dir, "single"), filepath.Join(dir, "dp")
	mustRun(t, append(common, "--batch", "8", "--out", single)...)
	r := mustRun(t, append(common, "--batch", "4", "--nproc", "2", "--out", dp)...)
	if !strings.Contains(r.stdout, "data-parallel: 2 ranks (ring)") {
		t.Errorf("the header does not say the run is data-parallel:\n%s", r.stdout)
	}
	if n := strings.Count(r.stdout, "done: steps 1-6"); n != 1 {
		t.Errorf("the summary appears %d times, want once (rank 0 alone prints):\n%s", n, r.stdout)
	}
	want, _ := checkpointParams(t, single)
	got, step := checkpointParams(t, dp)
	if step != 6 {
		t.Fatalf("data-parallel checkpoint at step %d, want 6", step)
	}
	sameParams(t, "2 ranks × batch 4 after 6 steps", got, want)
	sm, dm := readMetrics(t, single), readMetrics(t, dp)
	if len(dm) != len(sm) {
		t.Fatalf("data-parallel metrics has %d lines, the single process's %d", len(dm), len(sm))
	}
	for i := range sm {
		if dm[i].Step != sm[i].Step || math.Abs(dm[i].Loss-sm[i].Loss) > 1e-4 {
			t.Fatalf("metrics line %d: step %d loss %.5f, the single process's step %d loss %.5f",
				i, dm[i].Step, dm[i].Loss, sm[i].Step, sm[i].Loss)
		}
	}

	mustRun(t, "train", "--resume", single, "--steps", "9", "--no-progress")
	mustRun(t, "train", "--resume", dp, "--steps", "9", "--nproc", "2", "--no-progress")
	want, _ = checkpointParams(t, single)
	got, step = checkpointParams(t, dp)
	if step != 9 {
		t.Fatalf("resumed data-parallel checkpoint at step %d, want 9", step)
	}
	sameParams(t, "2 ranks resumed to step 9", got, want)
}

var rankPID = regexp.MustCompile(`rank (\d+) pid (\d+)`)

// Killing one rank mid-run ends the whole run: the supervisor names the
// rank, ends the others and exits 1; no rank is left running and the last
// checkpoint loads. The context only detects a hang.
func TestNprocKilledRankEndsRun(t *testing.T) {
	out := filepath.Join(t.TempDir(), "run")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, "train", "--preset", "tiny", "--steps", "100000", "--log-every", "1",
		"--checkpoint-every", "5", "--eval-every", "0", "--corpus", corpus(t), "--out", out, "--no-progress", "--nproc", "2")
	cmd.Env = command().Env
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr syncBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var text strings.Builder
	sc := bufio.NewScanner(stdout)
	pids := map[int]int{}
	killed := false
	for sc.Scan() {
		text.WriteString(sc.Text() + "\n")
		if !killed && strings.HasPrefix(sc.Text(), "checkpoint at step 10:") {
			for _, m := range rankPID.FindAllStringSubmatch(stderr.String(), -1) {
				r, _ := strconv.Atoi(m[1])
				pids[r], _ = strconv.Atoi(m[2])
			}
			if pids[1] == 0 || pids[0] == 0 {
				cmd.Process.Kill()
				t.Fatalf("the supervisor did not name the ranks' pids:\n%s", stderr.String())
			}
			if err := syscall.Kill(pids[1], syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			killed = true
		}
	}
	io.Copy(io.Discard, stdout)
	err = cmd.Wait()
	if ctx.Err() != nil {
		t.Fatalf("the run did not end after rank 1 was killed (hang)\nstdout:\n%s\nstderr:\n%s", text.String(), stderr.String())
	}
	if !killed {
		t.Fatalf("the run ended before its checkpoint at step 10: %v\nstdout:\n%s\nstderr:\n%s", err, text.String(), stderr.String())
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("run with a killed rank: %v, want exit status 1\nstderr:\n%s", err, stderr.String())
	}
	if !strings.Contains(stderr.String(), "rank 1 of 2 was killed") || !strings.Contains(stderr.String(), "checkpoint is intact") {
		t.Errorf("stderr does not say which rank died and what became of the run:\n%s", stderr.String())
	}
	if err := syscall.Kill(pids[0], 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("rank 0 (pid %d) still exists after the supervisor exited (kill 0: %v)", pids[0], err)
	}
	ck, err := checkpoint.Latest(out)
	if err != nil {
		t.Fatal(err)
	}
	if step := loadFinite(t, ck); step < 10 {
		t.Fatalf("latest checkpoint is at step %d, want at least 10", step)
	}
}

// Bad --nproc values and rank environments fail with one clear line and
// start nothing.
func TestNprocBadInput(t *testing.T) {
	out := filepath.Join(t.TempDir(), "run")
	base := []string{"train", "--preset", "tiny", "--steps", "2", "--out", out, "--no-progress"}
	r := runCLI(t, append(base, "--nproc", "0")...)
	checkCleanFailure(t, "--nproc 0", r, "--nproc 0", ">= 1")

	cmd := command(append(base, "--nproc", "2")...)
	cmd.Env = append(cmd.Env, "MLX_RANK=0")
	r = runCmd(t, cmd)
	checkCleanFailure(t, "--nproc 2 with MLX_RANK", r, "--nproc 2", "MLX_RANK")

	cmd = command(base...)
	cmd.Env = append(cmd.Env, "MLX_RANK=1")
	r = runCmd(t, cmd)
	checkCleanFailure(t, "MLX_RANK without a backend", r, "MLX_RANK=1", "MLX_HOSTFILE", "NCCL_HOST_IP")
}

// runCmd runs a prepared command to completion.
func runCmd(t *testing.T, cmd *exec.Cmd) result {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := result{stdout: stdout.String(), stderr: stderr.String()}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	case err != nil:
		t.Fatalf("running %s: %v", cmd, err)
	}
	return r
}

// syncBuffer is a bytes.Buffer safe for a writer goroutine and a reader.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// bench --nproc 2 prints one result, rank 0's, counting both ranks' tokens,
// from a step traced once; --compare refuses --nproc.
func TestBenchNproc(t *testing.T) {
	r := mustRun(t, "bench", "--preset", "tiny", "--steps", "5", "--warmup-steps", "2", "--nproc", "2", "--json")
	var got map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
		t.Fatalf("bench --nproc 2 --json printed not one JSON object: %v\n%s", err, r.stdout)
	}
	if got["ranks"] != 2.0 || got["tokens_per_step"] != 2.0*8*64 || got["traces"] != 1.0 {
		t.Fatalf("bench JSON has ranks %v, tokens_per_step %v, traces %v; want 2, 2 × 8 × 64, 1",
			got["ranks"], got["tokens_per_step"], got["traces"])
	}
	r = runCLI(t, "bench", "--preset", "tiny", "--compare", "--nproc", "2")
	checkCleanFailure(t, "bench --compare --nproc 2", r, "--compare", "--nproc 2")
}

// Ctrl-C to the supervisor reaches rank 0, which finishes its step, writes
// a checkpoint and exits 130 with the command that resumes every rank;
// no rank is left running. The context only detects a hang.
func TestNprocInterruptCheckpointsAndExits130(t *testing.T) {
	out := filepath.Join(t.TempDir(), "run")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, "train", "--preset", "tiny", "--steps", "100000", "--log-every", "1",
		"--eval-every", "0", "--corpus", corpus(t), "--out", out, "--no-progress", "--nproc", "2")
	cmd.Env = command().Env
	var stderr syncBuffer
	cmd.Stderr = &stderr
	text, err := runInterruptedAtStep3(t, cmd)
	var ee *exec.ExitError
	if ctx.Err() != nil || !errors.As(err, &ee) || ee.ExitCode() != exitSIGINT {
		t.Fatalf("interrupted --nproc 2 run: %v (context %v), want exit %d\nstdout:\n%s\nstderr:\n%s",
			err, ctx.Err(), exitSIGINT, text, stderr.String())
	}
	if !strings.Contains(text, "--resume "+out+" --nproc 2") {
		t.Errorf("the interrupted run does not say how to resume both ranks:\n%s", text)
	}
	started := rankPID.FindAllStringSubmatch(stderr.String(), -1)
	if len(started) != 2 {
		t.Errorf("the supervisor named %d rank pids, want 2:\n%s", len(started), stderr.String())
	}
	for _, m := range started {
		pid, _ := strconv.Atoi(m[2])
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("rank %s (pid %d) still exists after the supervisor exited", m[1], pid)
		}
	}
	ck, err := checkpoint.Latest(out)
	if err != nil {
		t.Fatalf("no checkpoint after SIGINT: %v\n%s", err, text)
	}
	if step := loadFinite(t, ck); step < 3 {
		t.Fatalf("checkpoint at step %d, want one taken at the interrupt (step >= 3)", step)
	}
}
