package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/posttrainllm/posttrainllm/checkpoint"
	"github.com/posttrainllm/posttrainllm/internal/mlxtest"
	"github.com/posttrainllm/posttrainllm/mlx"
	"github.com/posttrainllm/posttrainllm/train"
)

// smallModel are flags for a model that trains hundreds of steps a second
// on two CPU cores, so process-level tests spend their time on what they
// test.
var smallModel = []string{"--preset", "tiny", "--d-model", "16", "--layers", "1", "--heads", "2",
	"--context", "16", "--batch", "2", "--eval-every", "0", "--no-progress"}

func joinArgs(parts ...[]string) []string {
	var out []string
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// writeCorpus writes about n bytes of repetitive English into dir/name.
func writeCorpus(t *testing.T, dir, name string, n int) string {
	t.Helper()
	words := []string{"the", "quick", "brown", "fox", "jumps", "over", "a", "lazy", "dog", "and", "runs", "home"}
	var b strings.Builder
	for i := 0; b.Len() < n; i++ {
		b.WriteString(words[(i*7+i/5)%len(words)])
		if i%9 == 8 {
			b.WriteString(".\n")
		} else {
			b.WriteByte(' ')
		}
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// digest maps every file and directory under root to its content hash
// ("dir" for directories), so a test can tell that nothing changed.
func treeDigest(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if d.IsDir() {
			out[rel] = "dir"
			return nil
		}
		if !d.Type().IsRegular() {
			out[rel] = d.Type().String()
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		out[rel] = hex.EncodeToString(sum[:])
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func sameDigest(a, b map[string]string) string {
	for k, v := range a {
		if b[k] != v {
			return fmt.Sprintf("%s changed or went missing", k)
		}
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			return fmt.Sprintf("%s appeared", k)
		}
	}
	return ""
}

// crashSigns are what a Go panic, a runtime abort or a C++ abort leave on
// stderr; a clean failure shows none of them.
var crashSigns = []string{"panic:", "goroutine ", "fatal error:", "SIGSEGV", "terminate called", "libc++abi", "Aborted", "runtime error"}

// checkCleanFailure asserts a one-line "posttrainllm: …" error holding each
// of want, a usage or runtime exit status (1 or 2, never a signal), and no
// trace of a crash.
func checkCleanFailure(t *testing.T, what string, r result, want ...string) {
	t.Helper()
	if r.code != 1 && r.code != 2 {
		t.Errorf("%s: exit %d, want 1 or 2\nstderr: %s", what, r.code, r.stderr)
	}
	for _, s := range crashSigns {
		if strings.Contains(r.stderr, s) {
			t.Errorf("%s: stderr shows a crash (%q):\n%s", what, s, r.stderr)
			return
		}
	}
	checkErrorLine(t, what, r.stderr, want...)
}

// checkErrorLine checks that stderr is one line, "posttrainllm: …", that
// mentions every string of want: how the CLI reports bad input.
func checkErrorLine(t *testing.T, what, stderr string, want ...string) {
	t.Helper()
	if !strings.HasPrefix(stderr, "posttrainllm: ") || strings.Count(strings.TrimSpace(stderr), "\n") > 0 {
		t.Errorf("%s: want one line starting with posttrainllm:, got %q", what, stderr)
	}
	for _, w := range want {
		if !strings.Contains(stderr, w) {
			t.Errorf("%s: stderr %q does not mention %q", what, stderr, w)
		}
	}
}

// unwritableDir returns a directory this process cannot create files in.
// Root ignores permission bits, so as root it is /sys, which refuses new
// files even to root (the tests run on Linux and macOS; macOS developers
// do not run tests as root).
func unwritableDir(t *testing.T) string {
	t.Helper()
	dir := "/sys"
	if os.Geteuid() != 0 {
		dir = t.TempDir()
		if err := os.Chmod(dir, 0o555); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Chmod(dir, 0o755) })
	}
	if f, err := os.CreateTemp(dir, "probe-"); err == nil {
		f.Close()
		os.Remove(f.Name())
		t.Fatalf("%s is writable; cannot test an unwritable --out", dir)
	}
	return dir
}

// editFile rewrites path through f.
func editFile(t *testing.T, path string, f func([]byte) []byte) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, f(b), 0o644); err != nil {
		t.Fatal(err)
	}
}

// copyDir copies a run folder.
func copyDir(t *testing.T, from, to string) {
	t.Helper()
	err := filepath.WalkDir(from, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(from, p)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(to, rel), 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(to, rel), b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// toFloat16 rewrites a safetensors file with every array cast to float16.
func toFloat16(t *testing.T, path string) {
	t.Helper()
	mlxtest.Run(t, func(t testing.TB) { castFile(t, path, mlx.Float16) })
}

// castFile rewrites a safetensors file with every array cast to dtype, on
// the MLX thread.
func castFile(t testing.TB, path string, dtype mlx.Dtype) {
	t.Helper()
	arrs, meta, err := mlx.LoadSafetensors(path)
	if err != nil {
		t.Fatal(err)
	}
	half := map[string]*mlx.Array{}
	for n, a := range arrs {
		half[n] = mlx.AsType(a, dtype)
	}
	if err := mlx.SaveSafetensors(path, half, meta); err != nil {
		t.Fatal(err)
	}
	for n := range arrs {
		arrs[n].Free()
		half[n].Free()
	}
}

// Every kind of bad input the issue lists ends in a one-line error that
// names the bad value and what was expected, a non-zero exit without a
// crash, and no file created or changed.
func TestReliabilityBadInput(t *testing.T) {
	dir := t.TempDir()
	corpusPath := writeCorpus(t, dir, "corpus.txt", 30_000)

	// Two finished runs to resume from: good, and other (d_model 32).
	good, other := filepath.Join(dir, "good"), filepath.Join(dir, "other")
	mustRun(t, joinArgs([]string{"train", "--steps", "30", "--corpus", corpusPath, "--out", good}, smallModel)...)
	mustRun(t, joinArgs([]string{"train", "--steps", "30", "--corpus", corpusPath, "--out", other}, smallModel,
		[]string{"--d-model", "32"})...)
	otherCk, err := checkpoint.Latest(other)
	if err != nil {
		t.Fatal(err)
	}
	ckFile := func(run, name string) string {
		ck, _ := checkpoint.Latest(run)
		return filepath.Join(ck, name)
	}

	type testCase struct {
		name string
		// setup prepares the case in its own folder and returns the command
		// line and the folder that must come out unchanged.
		setup func(t *testing.T, cdir string) (argv []string, watch string)
		want  []string
	}
	train1 := func(extra ...string) []string {
		return joinArgs([]string{"train", "--steps", "30"}, smallModel, extra)
	}
	// inCase runs a train command whose --out lies inside the case folder.
	inCase := func(extra ...string) func(*testing.T, string) ([]string, string) {
		return func(t *testing.T, cdir string) ([]string, string) {
			return train1(append([]string{"--corpus", corpusPath, "--out", filepath.Join(cdir, "run")}, extra...)...), cdir
		}
	}
	// withCorpus trains on the corpus path write returns, written into the
	// case folder.
	withCorpus := func(write func(t *testing.T, cdir string) string) func(*testing.T, string) ([]string, string) {
		return func(t *testing.T, cdir string) ([]string, string) {
			return train1("--corpus", write(t, cdir), "--out", filepath.Join(cdir, "run")), cdir
		}
	}
	// resume copies good into the case folder, damages it with damage and
	// resumes it.
	resume := func(damage func(t *testing.T, run string), extra ...string) func(*testing.T, string) ([]string, string) {
		return func(t *testing.T, cdir string) ([]string, string) {
			run := filepath.Join(cdir, "run")
			copyDir(t, good, run)
			damage(t, run)
			return append([]string{"train", "--resume", run, "--steps", "40"}, extra...), cdir
		}
	}
	noDamage := func(*testing.T, string) {}

	cases := []testCase{
		{"missing corpus", withCorpus(func(t *testing.T, cdir string) string { return filepath.Join(cdir, "missing.txt") }),
			[]string{"invalid --corpus", "missing.txt", "no such file or directory"}},
		{"unreadable corpus (a FIFO)", withCorpus(func(t *testing.T, cdir string) string {
			p := filepath.Join(cdir, "pipe.txt")
			if err := syscall.Mkfifo(p, 0o644); err != nil {
				t.Fatal(err)
			}
			return p
		}), []string{"pipe.txt", "want a regular file or a directory"}},
		{"empty corpus", withCorpus(func(t *testing.T, cdir string) string { return writeCorpus(t, cdir, "empty.txt", 0) }),
			[]string{"empty.txt", "empty", "0 bytes"}},
		{"corpus shorter than context+1 tokens", withCorpus(func(t *testing.T, cdir string) string {
			return writeCorpus(t, cdir, "short.txt", 100)
		}), []string{"short.txt", "context+1 = 17", "use a larger corpus or a smaller context"}},
		{"binary corpus file", withCorpus(func(t *testing.T, cdir string) string {
			p := filepath.Join(cdir, "data.txt")
			os.WriteFile(p, []byte("abc\x00\xff\xfe"), 0o644)
			return p
		}), []string{"data.txt", "not a text file"}},
		{"directory with no text files", withCorpus(func(t *testing.T, cdir string) string {
			d := filepath.Join(cdir, "blobs")
			os.Mkdir(d, 0o755)
			os.WriteFile(filepath.Join(d, "a.bin"), []byte("text in a file of another extension"), 0o644)
			return d
		}), []string{"blobs", "no text files", ".txt"}},

		{"unknown preset", func(t *testing.T, cdir string) ([]string, string) {
			return []string{"train", "--preset", "gigantic", "--corpus", corpusPath, "--out", filepath.Join(cdir, "run")}, cdir
		}, []string{"invalid --preset gigantic", "want one of tiny"}},
		{"steps 0", inCase("--steps", "0"), []string{"invalid --steps 0", "want >= 1"}},
		{"steps -3", inCase("--steps", "-3"), []string{"invalid --steps -3", "want >= 1"}},
		{"accum 0", inCase("--accum", "0"), []string{"invalid --accum 0", "want >= 1"}},
		{"batch 0", inCase("--batch", "0"), []string{"invalid --batch 0", "want >= 1"}},
		{"negative lr", inCase("--lr", "-0.01"), []string{"invalid --lr -0.01", "want a finite value > 0"}},
		{"NaN lr", inCase("--lr", "NaN"), []string{"invalid --lr NaN", "want a finite value > 0"}},
		// The preset's warm-up (20) shrinks to fit --steps 2, so the flag
		// that is wrong is the one named.
		{"accum 0 with steps 2", inCase("--steps", "2", "--accum", "0"), []string{"invalid --accum 0", "want >= 1"}},
		{"NaN lr with steps 2", inCase("--steps", "2", "--lr", "NaN"), []string{"invalid --lr NaN", "want a finite value > 0"}},
		{"batch 0 with steps 2", inCase("--batch", "0", "--steps", "2"), []string{"invalid --batch 0", "want >= 1"}},
		{"micro-batch 0", inCase("--micro-batch", "0"),
			[]string{`invalid argument "0" for "--micro-batch" flag`, "want auto or a number of sequences >= 1"}},
		{"micro-batch not a number", inCase("--micro-batch", "two"), []string{`invalid argument "two" for "--micro-batch" flag`}},
		{"micro-batch not dividing batch × accum", inCase("--accum", "3", "--micro-batch", "4"),
			[]string{"invalid --micro-batch 4", "want a divisor of batch × accum = 2 × 3 = 6 (1, 2, 3, 6)"}},
		{"memory budget neither bytes nor a fraction", inCase("--memory-budget", "8XB"),
			[]string{"invalid --memory-budget 8XB", "want bytes with a unit"}},
		{"windows neither auto, device nor host", inCase("--windows", "gpu"),
			[]string{"invalid --windows gpu: want auto, device or host"}},
		{"a set warm-up longer than the steps", inCase("--steps", "2", "--warmup", "20"),
			[]string{"invalid --warmup 20", "want < steps (2)"}},
		{"lr beyond float32", inCase("--lr", "1e300"), []string{"invalid --lr 1e+300", "float32"}},
		{"context larger than the corpus allows", inCase("--context", "100000"),
			[]string{"context+1 = 100001", "context 100000", "use a larger corpus or a smaller context"}},
		{"context beyond MLX's 32-bit dimensions", inCase("--context", strconv.Itoa(math.MaxInt)),
			[]string{"invalid --context 9223372036854775807", "want <= 2147483647"}},
		{"vocabulary too large for memory", inCase("--vocab", "1000000000"),
			[]string{"vocab_size 1000000000", "more than the", "of this machine"}},
		{"batch too large for memory", inCase("--batch", "100000000"),
			[]string{"batch 100000000", "more than the", "of this machine"}},
		{"layers too many for memory", inCase("--layers", "1000000000"),
			[]string{"layers 1000000000", "more than the", "of this machine"}},
		{"bench with layers too many for memory", func(t *testing.T, cdir string) ([]string, string) {
			return []string{"bench", "--layers", "1000000000", "--steps", "2"}, cdir
		}, []string{"layers 1000000000", "more than the", "of this machine"}},

		{"--resume at a missing folder", func(t *testing.T, cdir string) ([]string, string) {
			return []string{"train", "--resume", filepath.Join(cdir, "nope"), "--steps", "40"}, cdir
		}, []string{"invalid --resume", "nope", "no such file or directory"}},
		{"--resume at a folder without checkpoints", func(t *testing.T, cdir string) ([]string, string) {
			os.Mkdir(filepath.Join(cdir, "empty-run"), 0o755)
			return []string{"train", "--resume", filepath.Join(cdir, "empty-run"), "--steps", "40"}, cdir
		}, []string{"invalid --resume", "empty-run", "no checkpoint"}},
		{"--resume with a flag of another model shape", resume(noDamage, "--d-model", "32"),
			[]string{"invalid --d-model 32", "another model shape", "d_model 16"}},
		{"--resume at parameters of another model shape", resume(func(t *testing.T, run string) {
			copyFileT(t, filepath.Join(otherCk, checkpoint.ModelFile), ckFile(run, checkpoint.ModelFile))
		}), []string{"model.safetensors", `"tok_embeddings.weight" has shape [256 32], this model needs [256 16]`}},
		{"--resume at optimizer state of another model shape", resume(func(t *testing.T, run string) {
			copyFileT(t, filepath.Join(otherCk, checkpoint.OptimizerFile), ckFile(run, checkpoint.OptimizerFile))
		}), []string{"optimizer.safetensors", "has shape [256 32], this model needs [256 16]"}},
		{"--resume at parameters of another dtype", resume(func(t *testing.T, run string) {
			toFloat16(t, ckFile(run, checkpoint.ModelFile))
		}), []string{"model.safetensors", "is float16, this model keeps parameters in float32"}},
		{"--resume at a truncated safetensors file", resume(func(t *testing.T, run string) {
			editFile(t, ckFile(run, checkpoint.ModelFile), func(b []byte) []byte { return b[:len(b)-100] })
		}), []string{"model.safetensors", "byte range", "inside"}},
		{"--resume at a safetensors file cut inside its header", resume(func(t *testing.T, run string) {
			editFile(t, ckFile(run, checkpoint.OptimizerFile), func(b []byte) []byte { return b[:50] })
		}), []string{"optimizer.safetensors", "header length"}},
		{"--resume at an empty safetensors file", resume(func(t *testing.T, run string) {
			editFile(t, ckFile(run, checkpoint.OptimizerFile), func(b []byte) []byte { return nil })
		}), []string{"optimizer.safetensors", "no 8-byte header length"}},
		{"--resume at a safetensors file with a corrupt header", resume(func(t *testing.T, run string) {
			editFile(t, ckFile(run, checkpoint.ModelFile), func(b []byte) []byte { copy(b[20:], "}}}}}}}}"); return b })
		}), []string{"model.safetensors", "header is not a JSON object"}},
		{"--resume at corrupt JSON", resume(func(t *testing.T, run string) {
			editFile(t, ckFile(run, checkpoint.StateFile), func(b []byte) []byte { return b[:len(b)/2] })
		}), []string{"invalid --resume", "state.json is not valid"}},
		{"--resume at state.json of another format", resume(func(t *testing.T, run string) {
			editFile(t, ckFile(run, checkpoint.StateFile), func(b []byte) []byte {
				return bytes.Replace(b, []byte(`"format": 1`), []byte(`"format": 7`), 1)
			})
		}), []string{"invalid --resume", "state.json has format 7, this build reads format 1"}},

		{"--resume at state.json claiming an enormous model", resume(func(t *testing.T, run string) {
			editFile(t, ckFile(run, checkpoint.StateFile), enormousModel)
		}), []string{"layers 1000000000", "more than the", "of this machine"}},
		{"sample from state.json claiming an enormous model", func(t *testing.T, cdir string) ([]string, string) {
			run := filepath.Join(cdir, "run")
			copyDir(t, good, run)
			editFile(t, ckFile(run, checkpoint.StateFile), enormousModel)
			return []string{"sample", "--from", run, "--tokens", "5"}, cdir
		}, []string{"layers 1000000000", "more than the", "of this machine"}},

		{"--out is a file", func(t *testing.T, cdir string) ([]string, string) {
			f := filepath.Join(cdir, "file")
			os.WriteFile(f, []byte("precious"), 0o644)
			return train1("--corpus", corpusPath, "--out", f), cdir
		}, []string{"invalid --out", "it is a file; want a directory"}},
		{"--out below a file", func(t *testing.T, cdir string) ([]string, string) {
			f := filepath.Join(cdir, "file")
			os.WriteFile(f, []byte("precious"), 0o644)
			return train1("--corpus", corpusPath, "--out", filepath.Join(f, "run")), cdir
		}, []string{"invalid --out", "not a directory"}},
		{"--out not writable", func(t *testing.T, cdir string) ([]string, string) {
			return train1("--corpus", corpusPath, "--out", filepath.Join(unwritableDir(t), "ptlm-run")), cdir
		}, []string{"invalid --out", "ptlm-run", "cannot create it in"}},

		{"sample from a truncated checkpoint", func(t *testing.T, cdir string) ([]string, string) {
			run := filepath.Join(cdir, "run")
			copyDir(t, good, run)
			editFile(t, ckFile(run, checkpoint.ModelFile), func(b []byte) []byte { return b[:len(b)/2] })
			return []string{"sample", "--from", run, "--tokens", "5"}, cdir
		}, []string{"model.safetensors", "safetensors"}},

		{"eval --from at a file", func(t *testing.T, cdir string) ([]string, string) {
			f := filepath.Join(cdir, "file.txt")
			os.WriteFile(f, []byte("precious"), 0o644)
			return []string{"eval", "--from", f}, cdir
		}, []string{"invalid --from", "file.txt", "is a file; want a run folder or a checkpoint directory"}},
		{"eval of an unknown split", func(t *testing.T, cdir string) ([]string, string) {
			run := filepath.Join(cdir, "run")
			copyDir(t, good, run)
			return []string{"eval", "--from", run, "--split", "test"}, cdir
		}, []string{"invalid --split test", "want val, train or all"}},
		{"eval --seed without random windows", func(t *testing.T, cdir string) ([]string, string) {
			run := filepath.Join(cdir, "run")
			copyDir(t, good, run)
			return []string{"eval", "--from", run, "--seed", "3"}, cdir
		}, []string{"--seed 3 without --eval-tokens"}},
		{"eval of a truncated checkpoint", func(t *testing.T, cdir string) ([]string, string) {
			run := filepath.Join(cdir, "run")
			copyDir(t, good, run)
			editFile(t, ckFile(run, checkpoint.ModelFile), func(b []byte) []byte { return b[:len(b)/2] })
			return []string{"eval", "--from", run}, cdir
		}, []string{"model.safetensors", "safetensors"}},
	}

	goodDigest := treeDigest(t, good)
	for _, c := range cases {
		t.Run(strings.ReplaceAll(c.name, " ", "_"), func(t *testing.T) {
			cdir := t.TempDir()
			argv, watch := c.setup(t, cdir)
			out := ""
			for i, a := range argv[:len(argv)-1] {
				if a == "--out" {
					out = argv[i+1]
				}
			}
			_, statErr := os.Stat(out)
			outExisted := statErr == nil
			before := treeDigest(t, watch)
			r := runCLI(t, argv...)
			checkCleanFailure(t, c.name, r, c.want...)
			if d := sameDigest(before, treeDigest(t, watch)); d != "" {
				t.Errorf("%s: %s; bad input must leave files alone", c.name, d)
			}
			if _, err := os.Stat(out); out != "" && err == nil && !outExisted {
				t.Errorf("%s: --out %s was created", c.name, out)
			}
			t.Logf("exit %d: %s", r.code, strings.TrimSpace(r.stderr))
		})
	}
	if d := sameDigest(goodDigest, treeDigest(t, good)); d != "" {
		t.Fatalf("the run the cases copied from: %s", d)
	}
}

// enormousModel edits state.json to claim a billion layers.
func enormousModel(b []byte) []byte {
	return bytes.Replace(b, []byte(`"layers": 1,`), []byte(`"layers": 1000000000,`), 1)
}

func copyFileT(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// loadFinite loads a checkpoint directory in this process and checks that
// every array in it is finite; it returns the checkpoint's step.
func loadFinite(t *testing.T, dir string) (step int) {
	t.Helper()
	mlxtest.Run(t, func(t testing.TB) { step = checkFinite(t, dir) })
	return step
}

// checkFinite is loadFinite on the MLX thread.
func checkFinite(t testing.TB, dir string) int {
	t.Helper()
	ck, err := train.LoadCheckpoint(dir)
	if err != nil {
		t.Fatalf("checkpoint %s does not load: %v", dir, err)
	}
	defer ck.Free()
	for _, m := range []map[string]*mlx.Array{ck.Params, ck.OptState} {
		for name, a := range m {
			f := mlx.All(mlx.IsFinite(a))
			ok, err := f.Item()
			f.Free()
			if err != nil || ok == 0 {
				t.Fatalf("checkpoint %s: %q is not finite (%v)", dir, name, err)
			}
		}
	}
	return ck.State.Step
}

// A learning rate of 1e30 makes the loss NaN within a few steps: the run
// stops at that step with a message naming it and the last good
// checkpoint, which is complete, finite and loadable.
func TestReliabilityHugeLRStopsAtNonFinite(t *testing.T) {
	dir := t.TempDir()
	corpusPath := writeCorpus(t, dir, "corpus.txt", 30_000)
	out := filepath.Join(dir, "run")
	mustRun(t, joinArgs([]string{"train", "--steps", "30", "--corpus", corpusPath, "--out", out}, smallModel)...)

	r := runCLI(t, "train", "--resume", out, "--steps", "200", "--lr", "1e30", "--schedule", "constant",
		"--warmup", "0", "--min-lr", "0", "--log-every", "1", "--checkpoint-every", "1", "--no-progress")
	checkCleanFailure(t, "huge lr", r, "training diverged", "not finite", "the last good one is", "try a lower --lr")
	last, err := checkpoint.Latest(out)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(r.stderr, "the last good one is "+last) {
		t.Fatalf("the message does not name the latest checkpoint %s:\n%s", last, r.stderr)
	}
	bad := 0
	if i := strings.Index(r.stderr, "step "); i < 0 {
		t.Fatalf("the message does not name the step: %q", r.stderr)
	} else if _, err := fmt.Sscanf(r.stderr[i:], "step %d:", &bad); err != nil {
		t.Fatalf("the message does not name the step: %q", r.stderr)
	}
	step := loadFinite(t, last)
	if step < 30 || step >= bad {
		t.Fatalf("last good checkpoint is step %d; want one from step 30 up to before step %d", step, bad)
	}
	ms := readMetrics(t, out)
	if end := ms[len(ms)-1]; end.Step >= bad || math.IsNaN(end.Loss) {
		t.Fatalf("metrics end at step %d loss %v, want the last finite step before %d", end.Step, end.Loss, bad)
	}
	t.Logf("exit %d at step %d, last good checkpoint step %d: %s", r.code, bad, step, strings.TrimSpace(r.stderr))
}

// SIGINT and SIGTERM finish the step in flight, write a complete
// checkpoint and exit with 130 and 143; --resume continues from that
// checkpoint to the end.
func TestReliabilitySignalsCheckpointAndResume(t *testing.T) {
	dir := t.TempDir()
	corpusPath := writeCorpus(t, dir, "corpus.txt", 30_000)
	for _, c := range []struct {
		sig  syscall.Signal
		code int
	}{{syscall.SIGINT, exitSIGINT}, {syscall.SIGTERM, exitSIGTERM}} {
		t.Run(c.sig.String(), func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "run")
			cmd := command(joinArgs([]string{"train", "--steps", "1000000", "--log-every", "10", "--checkpoint-every", "0",
				"--corpus", corpusPath, "--out", out}, smallModel)...)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			// Wait for the first metrics line: the run is then inside its
			// training loop with its signal handlers installed.
			metrics := filepath.Join(out, train.MetricsFile)
			for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(10 * time.Millisecond) {
				if b, _ := os.ReadFile(metrics); bytes.Contains(b, []byte("\n")) {
					break
				}
				if time.Now().After(deadline) {
					cmd.Process.Kill()
					cmd.Wait()
					t.Fatalf("no metrics line after 2 minutes\nstdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
				}
			}
			if err := cmd.Process.Signal(c.sig); err != nil {
				t.Fatal(err)
			}
			err := cmd.Wait()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != c.code {
				t.Fatalf("after %v: %v, want exit %d\nstdout:\n%s\nstderr:\n%s", c.sig, err, c.code, stdout.String(), stderr.String())
			}
			for _, s := range crashSigns {
				if strings.Contains(stderr.String(), s) {
					t.Fatalf("stderr shows a crash:\n%s", stderr.String())
				}
			}
			ck, err := checkpoint.Latest(out)
			if err != nil {
				t.Fatal(err)
			}
			entries, _ := os.ReadDir(checkpoint.Root(out))
			if len(entries) != 1 {
				t.Fatalf("checkpoints folder holds %d entries, want the one written at the signal", len(entries))
			}
			step := loadFinite(t, ck)
			ms := readMetrics(t, out)
			if logged := ms[len(ms)-1].Step; step < logged || step >= 1_000_000 {
				t.Fatalf("checkpoint at step %d, last logged step %d", step, logged)
			}
			if !strings.Contains(stdout.String(), fmt.Sprintf("stopped at step %d of 1000000", step)) {
				t.Fatalf("stdout does not say where the run stopped:\n%s", stdout.String())
			}

			end := step + 25
			r := mustRun(t, "train", "--resume", out, "--steps", strconv.Itoa(end), "--no-progress")
			if !strings.Contains(r.stdout, fmt.Sprintf("resuming at step %d", step)) {
				t.Fatalf("resume does not start at step %d:\n%s", step, r.stdout)
			}
			ck, _ = checkpoint.Latest(out)
			if got := loadFinite(t, ck); got != end {
				t.Fatalf("resumed run's checkpoint is step %d, want %d", got, end)
			}
			ms = readMetrics(t, out)
			for i := 1; i < len(ms); i++ {
				if ms[i].Step <= ms[i-1].Step {
					t.Fatalf("metrics step %d after %d", ms[i].Step, ms[i-1].Step)
				}
			}
			if ms[len(ms)-1].Step != end {
				t.Fatalf("metrics end at step %d, want %d", ms[len(ms)-1].Step, end)
			}
			t.Logf("%v at step %d: exit %d; resumed to step %d", c.sig, step, c.code, end)
		})
	}
}
