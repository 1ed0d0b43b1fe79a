package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/posttrainllm/posttrainllm/internal/distenv"
	"github.com/posttrainllm/posttrainllm/mlx"
)

// readyFDEnv names the file descriptor on which a rank that --nproc started
// reports that it joined its group (joinGroup writes "ready" there).
const readyFDEnv = "POSTTRAINLLM_READY_FD"

// bounds bound how long a failure takes to end a supervised run, not how
// fast anything must go.
type bounds struct {
	// connect is how long the ranks have to start and connect to each
	// other: a ring rank waits for its peers indefinitely, and so may
	// NCCL's rendezvous.
	connect time.Duration
	// grace is how long rank 0 has, once another rank has failed, to write
	// a checkpoint before it is killed; and how long the other ranks have
	// to finish after rank 0 finished.
	grace time.Duration
}

// runBounds are the bounds of --nproc.
var runBounds = bounds{connect: 3 * time.Minute, grace: 15 * time.Second}

// nprocHelp documents --nproc for train and bench.
const nprocHelp = `--nproc N starts N ranks of this command on this machine and supervises
them: on the CPU they meet on MLX's ring backend over loopback TCP, on a
GPU on NCCL with one GPU each (rank r sees only GPU r). Each rank trains
on its own rows of one seeded stream of windows (rank r takes rows
r·B … (r+1)·B−1 of each microbatch that one process with batch N·B would
draw), the gradients are averaged across the ranks inside the compiled
step, and every rank applies the same update: N ranks × --batch B make
the update of one process with --batch N·B. The learning rate is not
scaled with N. Rank 0 alone prints, evaluates and writes the run folder.
If a rank exits with an error, the others are ended within seconds and
the command fails naming it; ranks not connected after 3 minutes are
ended too. The last checkpoint stays intact. A process started with
MLX_RANK set (by mlx.launch, or by hand on several hosts; see
docs/distributed.md) is one rank of such a group.`

// rankEnv reports whether this process was started as one rank of a
// group: MLX_RANK is set, by --nproc's supervisor, mlx.launch or by hand.
func rankEnv() bool { return os.Getenv("MLX_RANK") != "" }

// checkNproc validates --nproc against the environment.
func checkNproc(nproc int) error {
	switch {
	case nproc < 1:
		return usageError("invalid --nproc %d: want >= 1 rank", nproc)
	case nproc > 1 && rankEnv():
		return usageError("--nproc %d with MLX_RANK=%s set: this process is already one rank of a group; drop --nproc or unset MLX_RANK",
			nproc, os.Getenv("MLX_RANK"))
	}
	return nil
}

// groupBackend picks the MLX backend a rank's environment configures:
// MLX_HOSTFILE is the ring's, NCCL_HOST_IP NCCL's.
func groupBackend() (string, error) {
	switch {
	case os.Getenv("MLX_HOSTFILE") != "":
		return "ring", nil
	case os.Getenv("NCCL_HOST_IP") != "":
		return "nccl", nil
	}
	return "", usageError("MLX_RANK=%s is set but neither MLX_HOSTFILE (ring backend) nor NCCL_HOST_IP (NCCL) is; "+
		"see docs/distributed.md", os.Getenv("MLX_RANK"))
}

// joinGroup connects this process to its group when it was started as a
// rank (rankEnv) and returns the group; otherwise it returns nil. It tells a
// supervising parent that it connected (readyFDEnv).
func joinGroup() (*mlx.Group, error) {
	if !rankEnv() {
		return nil, nil
	}
	backend, err := groupBackend()
	if err != nil {
		return nil, err
	}
	var g *mlx.Group
	err = mlx.Do(func() error {
		g, err = mlx.InitDistributed(true, backend)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("rank %s could not join its group: %w", os.Getenv("MLX_RANK"), err)
	}
	if fd := os.Getenv(readyFDEnv); fd != "" {
		n, err := strconv.Atoi(fd)
		if err != nil {
			return nil, fmt.Errorf("%s=%q: want a file descriptor number", readyFDEnv, fd)
		}
		f := os.NewFile(uintptr(n), "ready")
		_, err = f.WriteString("ready\n")
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("telling the supervisor that rank %d connected: %w", g.Rank(), err)
		}
	}
	return g, nil
}

// rankOutput is where a rank's normal output goes: rank 0's to w, the
// others' nowhere (their errors still go to stderr).
func rankOutput(g *mlx.Group, w io.Writer) io.Writer {
	if g.Rank() != 0 {
		return io.Discard
	}
	return w
}

// rank is one child process of a supervised run.
type rank struct {
	id     int
	cmd    *exec.Cmd
	stderr *tail // nil for rank 0, whose stderr is the parent's
	exited bool
}

// rankExit is a rank's end.
type rankExit struct {
	id  int
	err error
}

// launchRanks runs this command line again as nproc ranks (each with
// --nproc=1 and its rank's environment) and supervises them until every
// one has ended (see nprocHelp). Rank 0's output is the command's; another
// rank's stderr is shown when it fails. A first SIGINT or SIGTERM goes to
// rank 0, which finishes its step, checkpoints and exits; the others are
// then ended. The exit status is rank 0's, or 1 when another rank failed.
func launchRanks(stdout, stderr io.Writer, nproc int, device string) error {
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("--nproc: finding this program: %w", err)
	}
	envs, cleanup, err := rankEnvs(nproc, device)
	if err != nil {
		return err
	}
	defer cleanup()
	args := append(append([]string{}, os.Args[1:]...), "--nproc=1")
	ranks := make([]*rank, nproc)
	exits := make(chan rankExit, nproc)
	ready := make(chan int, nproc)
	var wg sync.WaitGroup
	defer wg.Wait()
	for i := range ranks {
		r, err := startRank(exe, args, envs[i], i, stdout, stderr, ready, exits, &wg)
		if err != nil {
			for _, s := range ranks[:i] {
				s.cmd.Process.Kill()
			}
			return err
		}
		ranks[i] = r
	}
	pids := make([]string, nproc)
	for i, r := range ranks {
		pids[i] = fmt.Sprintf("rank %d pid %d", i, r.cmd.Process.Pid)
	}
	fmt.Fprintf(stderr, "posttrainllm: started %d ranks (%s backend): %s\n", nproc, backendOf(device), strings.Join(pids, ", "))
	return supervise(ranks, stderr, ready, exits, runBounds)
}

// rankEnvs builds every rank's environment: a loopback ring (a hostfile in
// a temporary folder, removed by cleanup) on the CPU, NCCL on a GPU.
func rankEnvs(nproc int, device string) (envs [][]string, cleanup func(), err error) {
	envs = make([][]string, nproc)
	cleanup = func() {}
	if device == "gpu" {
		ports, err := distenv.FreeLoopbackPorts(1)
		if err != nil {
			return nil, nil, err
		}
		for r := range envs {
			envs[r] = distenv.NCCL(r, nproc, "127.0.0.1", ports[0])
		}
		return envs, cleanup, nil
	}
	dir, err := os.MkdirTemp("", "posttrainllm-ring-")
	if err != nil {
		return nil, nil, fmt.Errorf("--nproc: %w", err)
	}
	cleanup = func() { os.RemoveAll(dir) }
	hostfile := filepath.Join(dir, "hosts.json")
	if err := distenv.LoopbackRing(hostfile, nproc); err != nil {
		cleanup()
		return nil, nil, err
	}
	for r := range envs {
		envs[r] = distenv.Ring(r, hostfile)
	}
	return envs, cleanup, nil
}

func backendOf(device string) string {
	if device == "gpu" {
		return "nccl"
	}
	return "ring"
}

// startRank starts rank id and the goroutines that report when it
// connected (on ready) and when it ended (on exits).
func startRank(exe string, args, env []string, id int, stdout, stderr io.Writer,
	ready chan<- int, exits chan<- rankExit, wg *sync.WaitGroup) (*rank, error) {
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("--nproc: %w", err)
	}
	cmd := exec.Command(exe, args...)
	cmd.Env = append(append(os.Environ(), env...), readyFDEnv+"=3")
	cmd.ExtraFiles = []*os.File{pw}
	cmd.SysProcAttr = rankProcAttr()
	r := &rank{id: id, cmd: cmd}
	if id == 0 {
		cmd.Stdout, cmd.Stderr = stdout, stderr
	} else {
		r.stderr = &tail{max: 16 << 10}
		cmd.Stdout, cmd.Stderr = io.Discard, r.stderr
	}
	err = cmd.Start()
	pw.Close()
	if err != nil {
		pr.Close()
		return nil, fmt.Errorf("--nproc: starting rank %d: %w", id, err)
	}
	wg.Add(2)
	go func() {
		defer wg.Done()
		defer pr.Close()
		if line, _ := bufio.NewReader(pr).ReadString('\n'); line == "ready\n" {
			ready <- id
		}
	}()
	go func() {
		defer wg.Done()
		exits <- rankExit{id: id, err: cmd.Wait()}
	}()
	return r, nil
}

// supervise waits for the ranks, ending the others when one fails, when
// they do not connect in time, or on a second signal.
func supervise(ranks []*rank, stderr io.Writer, ready <-chan int, exits <-chan rankExit, b bounds) error {
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)

	connect := time.NewTimer(b.connect)
	defer connect.Stop()
	var grace <-chan time.Time
	connected, running := 0, len(ranks)
	var result error   // the run's outcome, set by the first failure
	var signalled bool // a signal was passed on to rank 0
	killOthers := func(except int) {
		for _, r := range ranks {
			if r.id != except && !r.exited {
				r.cmd.Process.Signal(syscall.SIGKILL)
			}
		}
	}
	for running > 0 {
		select {
		case <-ready:
			if connected++; connected == len(ranks) {
				connect.Stop()
			}
		case <-connect.C:
			if connected < len(ranks) && result == nil {
				result = fmt.Errorf("--nproc: only %d of %d ranks connected to each other within %s; ended them", connected, len(ranks), b.connect)
				killOthers(-1)
			}
		case <-grace:
			for _, r := range ranks {
				if !r.exited && result == nil {
					fmt.Fprintf(stderr, "posttrainllm: rank %d had not exited %s after rank 0 finished; ended it\n", r.id, b.grace)
				}
			}
			killOthers(-1)
		case sig := <-sigs:
			if !signalled && !ranks[0].exited {
				signalled = true
				ranks[0].cmd.Process.Signal(sig)
				continue
			}
			killOthers(-1)
			if result == nil {
				result = &exitError{code: 128 + int(sig.(syscall.Signal))}
			}
		case e := <-exits:
			running--
			r := ranks[e.id]
			r.exited = true
			if result != nil {
				continue
			}
			switch {
			case r.id == 0 && e.err == nil:
				// Done: the others ran the same steps and end now too.
				grace = time.After(b.grace)
			case r.id == 0:
				// Rank 0 said why it stopped (or was interrupted and wrote
				// a checkpoint); the others write nothing.
				killOthers(0)
				result = rankZeroExit(e.err)
			case e.err != nil:
				result = fmt.Errorf("rank %d of %d %s; ended the other ranks (rank 0 had %s to write a checkpoint), "+
					"the run folder's last checkpoint is intact%s", r.id, len(ranks), describeExit(e.err), b.grace, r.stderr.quoted())
				// Rank 0 may checkpoint if it is not waiting in a collective
				// for the rank that died; then it is killed.
				killOthers(0)
				ranks[0].cmd.Process.Signal(syscall.SIGTERM)
				grace = time.After(b.grace)
			}
		}
	}
	return result
}

// rankZeroExit is the command's result when rank 0 failed: its exit status,
// without a message of its own (rank 0 printed its error).
func rankZeroExit(err error) error {
	var ee *exec.ExitError
	if errors.As(err, &ee) && ee.ExitCode() > 0 {
		return &exitError{code: ee.ExitCode()}
	}
	return fmt.Errorf("rank 0 %s; ended the other ranks", describeExit(err))
}

// describeExit says how a rank ended.
func describeExit(err error) string {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return fmt.Sprintf("was killed (signal %d, %v)", int(ws.Signal()), ws.Signal())
		}
		return fmt.Sprintf("exited with status %d", ee.ExitCode())
	}
	return "failed: " + err.Error()
}

// tail keeps the last max bytes written to it.
type tail struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if over := len(t.b) - t.max; over > 0 {
		t.b = append(t.b[:0], t.b[over:]...)
	}
	return len(p), nil
}

// quoted is the kept output as an indented block after a colon, or "".
func (t *tail) quoted() string {
	if t == nil {
		return ""
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	s := strings.TrimSpace(string(t.b))
	if s == "" {
		return ""
	}
	return "; its output:\n    " + strings.ReplaceAll(s, "\n", "\n    ")
}

// nprocArg is the --nproc flag that starts a group of g's size again, or
// "" for a single process.
func nprocArg(g *mlx.Group) string {
	if g.Size() == 1 {
		return ""
	}
	return fmt.Sprintf(" --nproc %d", g.Size())
}
