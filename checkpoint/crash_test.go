package checkpoint

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/posttrainllm/posttrainllm/internal/mlxtest"
	"github.com/posttrainllm/posttrainllm/mlx"
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

// writerState is the state file a writer checkpoint of step carries.
type writerState struct {
	Step    int    `json:"step"`
	Sampler string `json:"sampler"`
	Tokens  int64  `json:"tokens"`
}

// stateOf returns the writerState of step.
func stateOf(step int) writerState {
	return writerState{Step: step, Sampler: strconv.Itoa(step), Tokens: int64(step) * 100}
}

// saveWriter saves the writer checkpoint of step under root, as a
// training run's checkpoint is laid out: model, optimizer, state file.
func saveWriter(root string, step int, params, opt *mlx.Array) (string, error) {
	js, err := json.Marshal(stateOf(step))
	if err != nil {
		return "", err
	}
	return Save(root, step,
		Arrays(ModelFile, []string{"w"}, []*mlx.Array{params}, map[string]string{"step": strconv.Itoa(step)}),
		Arrays(OptimizerFile, []string{"m"}, []*mlx.Array{opt}, nil),
		Bytes(StateFile, js))
}

// readWriterState reads and decodes the state file of checkpoint dir.
func readWriterState(dir string) (writerState, error) {
	var st writerState
	f, err := os.Open(filepath.Join(dir, StateFile))
	if err != nil {
		return st, err
	}
	defer f.Close()
	return st, DecodeJSON(f, &st)
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
	if dir, err := Latest(root); err == nil {
		st, err := readWriterState(dir)
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
			if _, err := saveWriter(Root(root), step, pa, oa); err != nil {
				fmt.Fprintln(os.Stderr, "writer:", err)
				os.Exit(3)
			}
			if err := Prune(Root(root), 2); err != nil {
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
	st, err := readWriterState(dir)
	if err != nil {
		t.Fatalf("checkpoint %s: state file does not read: %v", dir, err)
	}
	if st != stateOf(step) {
		t.Fatalf("checkpoint %s: state file says %+v; want the state of step %d", dir, st, step)
	}
	wantP, wantO := writerArrays(step)
	for _, c := range []struct {
		file, name string
		want       []float32
	}{{ModelFile, "w", wantP}, {OptimizerFile, "m", wantO}} {
		arrays, _, err := mlx.LoadSafetensors(filepath.Join(dir, c.file))
		if err != nil {
			t.Fatalf("checkpoint %s does not load: %v", dir, err)
		}
		defer mlx.Free(slices.Collect(maps.Values(arrays))...)
		a, ok := arrays[c.name]
		if !ok || len(arrays) != 1 {
			t.Fatalf("checkpoint %s: %s holds %v, want exactly %q", dir, c.file, slices.Sorted(maps.Keys(arrays)), c.name)
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

		root := Root(dir)
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
		dirs, err := List(root)
		if err != nil {
			t.Fatal(err)
		}
		last, err := Latest(dir)
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
	root := Root(dir)
	save := func(step int) (d string) {
		mlxtest.Run(t, func(t testing.TB) {
			p, o := writerArrays(step)
			pa, oa := mlx.FromSlice(p, writerElems), mlx.FromSlice(o, writerElems)
			defer mlx.Free(pa, oa)
			var err error
			if d, err = saveWriter(root, step, pa, oa); err != nil {
				t.Fatal(err)
			}
		})
		return d
	}
	save(4)
	final := save(5)
	// The state Save leaves when killed between its two renames.
	if err := os.Rename(final, final+oldSuffix); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(root, tmpPrefix+DirName(5)+"-123"), 0o755); err != nil {
		t.Fatal(err)
	}
	last, err := Latest(dir)
	if err != nil {
		t.Fatal(err)
	}
	if last != final+oldSuffix || checkWriterCheckpoint(t, last) != 5 {
		t.Fatalf("latest checkpoint %s, want %s", last, final+oldSuffix)
	}
	save(5)
	if err := Prune(root, 2); err != nil {
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
	if want := []string{DirName(4), DirName(5)}; strings.Join(names, " ") != strings.Join(want, " ") {
		t.Fatalf("after re-saving and pruning, %s holds %v, want %v", root, names, want)
	}
	if last, _ := Latest(dir); checkWriterCheckpoint(t, last) != 5 || last != final {
		t.Fatalf("latest checkpoint %s, want %s", last, final)
	}
}
