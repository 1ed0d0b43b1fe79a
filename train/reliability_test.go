package train

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/posttrainllm/posttrainllm/internal/mlxtest"
	"github.com/posttrainllm/posttrainllm/mlx"
	"github.com/posttrainllm/posttrainllm/model"
)

// writerDirEnv tells a re-executed test binary to run the checkpoint
// writer of TestHelperCheckpointWriter in the named folder.
const writerDirEnv = "PTLM_CHECKPOINT_WRITER_DIR"

// writerElems is the size of each array the writer saves: large enough
// that a checkpoint write takes a while, so most kills land inside one.
const writerElems = 64 << 10

// writerArrays returns the arrays a checkpoint of step holds, every
// element derived from the step so a reader can tell whose data it has.
func writerArrays(step int) (params, opt []float32) {
	params, opt = make([]float32, writerElems), make([]float32, writerElems)
	for i := range params {
		params[i] = float32(step) + float32(i%8)/8
		opt[i] = -float32(step)
	}
	return params, opt
}

// writerState is the RunState a writer checkpoint of step carries.
func writerState(step int) RunState {
	cfg := tinyConfig().WithDefaults()
	return RunState{Step: step, Config: cfg, SamplerState: []byte(strconv.Itoa(step)), TokensSeen: int64(step) * 100}
}

// TestHelperCheckpointWriter is not a test on its own: when the
// environment names a folder, it is the child process of
// TestKillDuringCheckpointWrites. It resumes from the newest checkpoint in
// that folder and saves checkpoints of increasing steps with keep=2
// pruning, forever, printing "saved N" after each, until it is killed.
// Every step is saved twice, the second time over the first, as a resumed
// run that is interrupted before its first update does, so kills also land
// in the middle of replacing a checkpoint.
func TestHelperCheckpointWriter(t *testing.T) {
	root := os.Getenv(writerDirEnv)
	if root == "" {
		return
	}
	mlxtest.Run(t, func(testing.TB) { writeCheckpointsForever(root) })
}

// writeCheckpointsForever is the writer TestHelperCheckpointWriter runs,
// on the MLX thread.
func writeCheckpointsForever(root string) {
	step := 1
	if dir, err := LatestCheckpoint(root); err == nil {
		st, err := ReadRunState(filepath.Join(dir, StateFile))
		if err != nil {
			fmt.Fprintln(os.Stderr, "writer:", err)
			os.Exit(3)
		}
		step = st.Step
	}
	for ; ; step++ {
		p, o := writerArrays(step)
		pa, oa := mlx.FromSlice(p, writerElems), mlx.FromSlice(o, writerElems)
		for range 2 {
			if _, err := SaveCheckpoint(CheckpointRoot(root), writerState(step), []string{"w"}, []*mlx.Array{pa},
				[]string{"m"}, []*mlx.Array{oa}); err != nil {
				fmt.Fprintln(os.Stderr, "writer:", err)
				os.Exit(3)
			}
			if err := PruneCheckpoints(CheckpointRoot(root), 2); err != nil {
				fmt.Fprintln(os.Stderr, "writer:", err)
				os.Exit(3)
			}
			fmt.Printf("saved %d\n", step)
		}
		mlx.Free(pa, oa)
	}
}

// checkWriterCheckpoint loads dir and checks that every array and the
// state hold what the writer saved for the step its name says.
func checkWriterCheckpoint(t *testing.T, dir string) (step int) {
	t.Helper()
	mlxtest.Run(t, func(t testing.TB) { step = checkWriterArrays(t, dir) })
	return step
}

// checkWriterArrays is checkWriterCheckpoint on the MLX thread.
func checkWriterArrays(t testing.TB, dir string) int {
	t.Helper()
	base := strings.TrimSuffix(filepath.Base(dir), oldSuffix)
	step, err := strconv.Atoi(strings.TrimPrefix(base, stepPrefix))
	if err != nil {
		t.Fatalf("checkpoint folder %s: %v", dir, err)
	}
	ck, err := LoadCheckpoint(dir)
	if err != nil {
		t.Fatalf("checkpoint %s does not load: %v", dir, err)
	}
	defer ck.Free()
	if want := writerState(step); ck.State.Step != step || ck.State.TokensSeen != want.TokensSeen ||
		string(ck.State.SamplerState) != string(want.SamplerState) {
		t.Fatalf("checkpoint %s: state.json says step %d, tokens %d, sampler %q; want the state of step %d",
			dir, ck.State.Step, ck.State.TokensSeen, ck.State.SamplerState, step)
	}
	wantP, wantO := writerArrays(step)
	for _, c := range []struct {
		arrays map[string]*mlx.Array
		name   string
		want   []float32
	}{{ck.Params, "w", wantP}, {ck.OptState, "m", wantO}} {
		a, ok := c.arrays[c.name]
		if !ok || len(c.arrays) != 1 {
			t.Fatalf("checkpoint %s: arrays %v, want exactly %q", dir, slices.Sorted(maps.Keys(c.arrays)), c.name)
		}
		got, err := a.Float32s()
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(c.want) {
			t.Fatalf("checkpoint %s: %q has %d elements, want %d", dir, c.name, len(got), len(c.want))
		}
		for i := range got {
			if got[i] != c.want[i] {
				t.Fatalf("checkpoint %s: %q[%d] = %g, want %g (data of another step)", dir, c.name, i, got[i], c.want[i])
			}
		}
	}
	return step
}

// kill -9 at random moments of a process that writes checkpoints in a
// tight loop: after every kill, every checkpoint the folder lists (and so
// the latest) loads and holds the data of its own step, leftovers of the
// interrupted write are ignored, and the next process resumes from it.
func TestKillDuringCheckpointWrites(t *testing.T) {
	const kills = 50
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(1, 2))
	midWrite, stoodIn, latest := 0, 0, 0
	for i := 0; i < kills; i++ {
		cmd := exec.Command(os.Args[0], "-test.run=^TestHelperCheckpointWriter$", "-test.count=1")
		cmd.Env = append(os.Environ(), writerDirEnv+"="+dir)
		cmd.Stderr = os.Stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// Wait for the first save of this process, so each one makes
		// progress, then kill it at a random moment of what follows.
		sc := bufio.NewScanner(out)
		if !sc.Scan() || !strings.HasPrefix(sc.Text(), "saved ") {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("kill %d: writer printed %q, want its first save", i, sc.Text())
		}
		drained := make(chan struct{})
		go func() {
			for sc.Scan() {
			}
			close(drained)
		}()
		time.Sleep(time.Duration(rng.IntN(30_000)) * time.Microsecond)
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		<-drained // the pipe closes when the child dies
		err = cmd.Wait()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Fatalf("kill %d: writer ended with %v, want killed by SIGKILL", i, err)
		}

		root := CheckpointRoot(dir)
		entries, err := os.ReadDir(root)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), tmpPrefix) {
				midWrite++
				break
			}
		}
		dirs, err := ListCheckpoints(root)
		if err != nil {
			t.Fatal(err)
		}
		last, err := LatestCheckpoint(dir)
		if err != nil {
			t.Fatalf("kill %d: %v", i, err)
		}
		if len(dirs) == 0 || dirs[len(dirs)-1] != last {
			t.Fatalf("kill %d: latest checkpoint %s is not the newest listed of %v", i, last, dirs)
		}
		for _, d := range dirs {
			checkWriterCheckpoint(t, d)
		}
		step := checkWriterCheckpoint(t, last)
		if strings.HasSuffix(last, oldSuffix) {
			stoodIn++
		}
		if step < latest {
			t.Fatalf("kill %d: latest checkpoint is step %d, an earlier process had saved step %d", i, step, latest)
		}
		latest = step
	}
	t.Logf("%d kills, %d left a partial write behind, %d struck while a step was re-saved; last checkpoint step %d",
		kills, midWrite, stoodIn, latest)
	if midWrite == 0 {
		t.Fatalf("none of %d kills landed inside a checkpoint write; the test did not test anything", kills)
	}
}

// A crash while a step is re-saved, after its old copy was moved aside and
// before the new one took its name, leaves the old copy as the latest
// checkpoint; the next save and prune clean up after it.
func TestCheckpointResaveCrashKeepsOldCopy(t *testing.T) {
	dir := t.TempDir()
	root := CheckpointRoot(dir)
	save := func(step int) (d string) {
		mlxtest.Run(t, func(t testing.TB) {
			p, o := writerArrays(step)
			pa, oa := mlx.FromSlice(p, writerElems), mlx.FromSlice(o, writerElems)
			defer mlx.Free(pa, oa)
			var err error
			if d, err = SaveCheckpoint(root, writerState(step), []string{"w"}, []*mlx.Array{pa}, []string{"m"}, []*mlx.Array{oa}); err != nil {
				t.Fatal(err)
			}
		})
		return d
	}
	save(4)
	final := save(5)
	// The state SaveCheckpoint leaves when killed between its two renames.
	if err := os.Rename(final, final+oldSuffix); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(root, tmpPrefix+stepDirName(5)+"-123"), 0o755); err != nil {
		t.Fatal(err)
	}
	last, err := LatestCheckpoint(dir)
	if err != nil {
		t.Fatal(err)
	}
	if last != final+oldSuffix || checkWriterCheckpoint(t, last) != 5 {
		t.Fatalf("latest checkpoint %s, want %s", last, final+oldSuffix)
	}
	save(5)
	if err := PruneCheckpoints(root, 2); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if want := []string{stepDirName(4), stepDirName(5)}; strings.Join(names, " ") != strings.Join(want, " ") {
		t.Fatalf("after re-saving and pruning, %s holds %v, want %v", root, names, want)
	}
	if last, _ := LatestCheckpoint(dir); checkWriterCheckpoint(t, last) != 5 || last != final {
		t.Fatalf("latest checkpoint %s, want %s", last, final)
	}
}

// A long run of 10 000 tiny steps through the Trainer keeps MLX's active
// memory flat after warm-up and leaves no goroutines behind.
func TestLongRunMemoryAndGoroutinesFlat(t *testing.T) {
	const steps, warm = 10_000, 100
	cfg := tinyConfig()
	cfg.Model = model.Config{VocabSize: 256, DModel: 16, Layers: 1, Heads: 2, Context: 16}
	cfg.Steps, cfg.Batch, cfg.Warmup, cfg.LogEvery = steps, 2, 10, 100
	ds := memoryDataset(t, syntheticText(20_000), cfg.Model.Context)
	tr, err := New(cfg, ds, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	// The MLX thread's goroutine starts on first use and lives for the
	// process: start it before counting.
	mlx.Do(func() error { return nil })
	goroutines := runtime.NumGoroutine()
	var atWarm, maxAfter uint64
	logs := 0
	tr.Hooks.OnLog = func(m Metrics) {
		logs++
		active := mlx.Memory().Active
		if m.Step == warm {
			atWarm = active
		}
		if m.Step >= warm {
			maxAfter = max(maxAfter, active)
		}
	}
	sum, err := tr.Run(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	if sum.Step != steps || logs != steps/cfg.LogEvery {
		t.Fatalf("ran %d steps with %d logs, want %d and %d", sum.Step, logs, steps, steps/cfg.LogEvery)
	}
	if sum.Traces != 1 {
		t.Fatalf("step traced %d times in a long run, want 1", sum.Traces)
	}
	const slack = 1 << 20
	if atWarm == 0 || maxAfter > atWarm+slack {
		t.Fatalf("MLX active memory %d bytes at step %d, up to %d later; want growth <= %d bytes", atWarm, warm, maxAfter, slack)
	}
	// The prefetcher's goroutine ends in Stop; give the runtime a moment to
	// retire it before counting.
	after := runtime.NumGoroutine()
	for i := 0; i < 100 && after > goroutines; i++ {
		time.Sleep(10 * time.Millisecond)
		after = runtime.NumGoroutine()
	}
	if after > goroutines {
		t.Fatalf("%d goroutines before the run, %d after", goroutines, after)
	}
	t.Logf("%d steps in %v; active memory %d bytes at step %d, max %d after", steps, sum.Elapsed, atWarm, warm, maxAfter)
}

// An update that overflows the parameters while the loss it was computed
// from is still finite is caught before the checkpoint it would poison.
func TestOverflowingUpdateWritesNoCheckpoint(t *testing.T) {
	cfg := tinyConfig()
	cfg.Steps, cfg.CheckpointEvery, cfg.LogEvery = 10, 1, 5
	// AdamW moves every weight by about lr, and weight decay by lr·wd·|w|
	// more: with the largest float32 lr, some weights overflow at once.
	wd := 0.1
	cfg.Schedule, cfg.LR, cfg.MinLR, cfg.Warmup, cfg.GradClip, cfg.WeightDecay = "constant", math.MaxFloat32, 0, 0, 0, &wd
	dir := t.TempDir()
	tr, err := New(cfg, memoryDataset(t, syntheticText(60_000), cfg.Model.Context), dir)
	if err != nil {
		t.Fatal(err)
	}
	sum, err := tr.Run(context.Background(), "")
	if !errors.Is(err, ErrNonFinite) || !strings.Contains(err.Error(), "step 1: parameter") {
		t.Fatalf("want ErrNonFinite naming a parameter at step 1, got %v", err)
	}
	if dirs, _ := ListCheckpoints(CheckpointRoot(dir)); len(dirs) != 0 || sum.LastCheckpoint != "" {
		t.Fatalf("a diverged run wrote checkpoints %v", dirs)
	}
}

// Sizes that would wrap around in MLX's 32-bit shapes are refused by
// Validate, and sizes whose parameters or batch cannot fit in memory by
// CheckMemory, before MLX allocates anything.
func TestAbsurdSizesRefused(t *testing.T) {
	huge := func(f func(*Config)) Config {
		c := tinyConfig().WithDefaults()
		f(&c)
		return c
	}
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{huge(func(c *Config) { c.Model.VocabSize = 1 << 40 }), "vocab_size = 1099511627776, want <= 2147483647"},
		{huge(func(c *Config) { c.Model.Context = math.MaxInt }), "context = 9223372036854775807, want <= 2147483647"},
		{huge(func(c *Config) { c.Batch = 1 << 31 }), "batch = 2147483648, want <= 2147483647"},
	} {
		if err := c.cfg.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Validate() = %v, want %q", err, c.want)
		}
	}
	if physicalMemory() == 0 {
		t.Fatal("physicalMemory() = 0 on this platform; CheckMemory cannot guard it")
	}
	for _, cfg := range []Config{
		huge(func(c *Config) { c.Model.VocabSize, c.Model.DModel = 2_000_000_000, 1024 }),
		huge(func(c *Config) { c.Model.DModel, c.Model.Heads = 1<<20, 2 }),
		huge(func(c *Config) { c.Model.Layers = 1 << 30 }),
		huge(func(c *Config) { c.Batch, c.Model.Context = 1<<30, 1<<20 }),
	} {
		if err := cfg.Validate(); err != nil {
			t.Fatalf("Validate() = %v, want these sizes valid in themselves", err)
		}
		if err := cfg.CheckMemory(); err == nil || !strings.Contains(err.Error(), "more than the") {
			t.Errorf("CheckMemory(%+v) = %v, want it refused", cfg.Model, err)
		}
		if _, err := New(cfg, memoryDataset(t, syntheticText(2_000), 32), t.TempDir()); err == nil {
			t.Errorf("New accepted a run needing %.3g bytes", cfg.MinMemory().Total())
		}
	}
	if err := tinyConfig().WithDefaults().CheckMemory(); err != nil {
		t.Fatalf("tiny config refused: %v", err)
	}
}

// The committed seed corpus of FuzzReadCheckpointState is in Go's fuzz file
// format and means what its names say: seeds named valid* parse, every
// other seed is rejected with an error.
func TestCheckpointStateSeedCorpus(t *testing.T) {
	dir := filepath.Join("testdata", "fuzz", "FuzzReadCheckpointState")
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	valid, invalid := 0, 0
	for _, e := range entries {
		text, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		header, value, _ := strings.Cut(strings.TrimSuffix(string(text), "\n"), "\n")
		quoted, ok := strings.CutPrefix(value, "[]byte(")
		quoted, ok2 := strings.CutSuffix(quoted, ")")
		b, err := strconv.Unquote(quoted)
		if header != "go test fuzz v1" || !ok || !ok2 || err != nil {
			t.Fatalf("%s: not a go test fuzz v1 file holding one []byte", e.Name())
		}
		_, err = ParseRunState([]byte(b))
		if strings.HasPrefix(e.Name(), "valid") {
			valid++
			if err != nil {
				t.Errorf("seed %s: %v", e.Name(), err)
			}
		} else if invalid++; err == nil {
			t.Errorf("seed %s parses, want it rejected", e.Name())
		}
	}
	if valid == 0 || invalid == 0 {
		t.Fatalf("%s holds %d valid and %d invalid seeds, want both kinds", dir, valid, invalid)
	}
}
