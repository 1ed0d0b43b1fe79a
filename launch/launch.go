// Package launch starts and supervises the ranks of a data-parallel run on
// this machine, so that the posttrainllm command (its --nproc flag) and any
// Go program can run N processes of one binary that train as one.
//
// The parent calls Run with the number of ranks and the program to start;
// Run gives every rank the environment MLX's distributed backends read (a
// loopback ring hostfile on the CPU, NCCL's rank, world size and rendezvous
// address with one GPU each on a GPU; see internal/distenv), starts them,
// and supervises them until every one has ended:
//
//   - rank 0's stdout and stderr are the parent's; another rank's stderr is
//     kept and quoted when it fails;
//   - a rank that fails ends the others within Bounds.Grace (rank 0 first
//     gets a SIGTERM and that long to write a checkpoint), and Run's error
//     names the rank;
//   - ranks that have not all connected within Bounds.Connect are ended;
//   - the first SIGINT or SIGTERM to the parent goes to rank 0 alone, which
//     finishes its step, checkpoints and exits; the others are then ended
//     (one whose next collective fails because rank 0 left does not change
//     the outcome: rank 0's status is the run's); a second signal ends
//     every rank.
//
// Each rank, a process in which InRank reports true, calls Join to connect
// to its group; Join tells the supervising parent that it connected.
package launch

import (
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/posttrainllm/posttrainllm/internal/distenv"
)

// Bounds bound how long a failure takes to end a supervised run, not how
// fast anything must go.
type Bounds struct {
	// Connect is how long the ranks have to start and connect to each
	// other: a ring rank waits for its peers indefinitely, and so may
	// NCCL's rendezvous.
	Connect time.Duration
	// Grace is how long rank 0 has, once another rank has failed, to write
	// a checkpoint before it is killed; and how long the other ranks have
	// to finish after rank 0 finished.
	Grace time.Duration
}

// DefaultBounds are the bounds Run uses when Config.Bounds is zero: long
// enough for NCCL's rendezvous and for a checkpoint of a large model.
var DefaultBounds = Bounds{Connect: 3 * time.Minute, Grace: 15 * time.Second}

// Config says which ranks Run starts and where their output goes.
type Config struct {
	// Nproc is the number of ranks, at least 1.
	Nproc int
	// Device is "gpu" for NCCL with one GPU per rank (rank r sees only GPU
	// r); anything else starts a ring over loopback TCP on the CPU.
	Device string
	// Exe is the program every rank runs; "" is this program
	// (os.Executable).
	Exe string
	// Args are every rank's arguments, without the program name. A rank
	// tells itself apart from the parent by InRank, so a program that runs
	// itself again need not change its arguments.
	Args []string
	// Stdout and Stderr receive rank 0's output; Stderr also the
	// supervisor's line naming the ranks' process ids. Nil discards.
	Stdout, Stderr io.Writer
	// Bounds bound how long a failure takes to end the run; zero is
	// DefaultBounds.
	Bounds Bounds
}

// ExitError is Run's error when rank 0 failed with an exit status of its
// own (rank 0 printed why, so the error adds no message), or when the
// parent was signalled twice (Code is then 128 + the signal's number). A
// command passes Code on as its own exit status.
type ExitError struct {
	// Code is the exit status the parent should exit with.
	Code int
}

// Error says the exit status.
func (e *ExitError) Error() string { return fmt.Sprintf("exit status %d", e.Code) }

// Run starts cfg.Nproc ranks of cfg.Exe with cfg.Args, each with its
// rank's environment, and supervises them until every one has ended (see
// the package comment). It returns nil when every rank succeeded, an
// *ExitError carrying rank 0's exit status when rank 0 failed, and an error
// naming the rank when another rank failed or the ranks did not connect.
func Run(cfg Config) error {
	if cfg.Nproc < 1 {
		return fmt.Errorf("launch: %d ranks: want >= 1", cfg.Nproc)
	}
	exe := cfg.Exe
	if exe == "" {
		var err error
		if exe, err = os.Executable(); err != nil {
			return fmt.Errorf("--nproc: finding this program: %w", err)
		}
	}
	// Rank 0's stderr is copied into cfg.Stderr by a goroutine of exec
	// while the supervisor writes its own lines there: one lock orders
	// them. (Without it a *bytes.Buffer, whose ReadFrom holds its length
	// across the blocking read, dropped the supervisor's lines.)
	stdout, stderr := orDiscard(cfg.Stdout), &lockedWriter{w: orDiscard(cfg.Stderr)}
	b := cfg.Bounds
	if b == (Bounds{}) {
		b = DefaultBounds
	}
	envs, cleanup, err := rankEnvs(cfg.Nproc, cfg.Device)
	if err != nil {
		return err
	}
	defer cleanup()
	// Signals are caught before the first rank starts, so that a Ctrl-C
	// during start-up reaches the supervisor rather than ending the parent
	// with its children left running.
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	ranks := make([]*rank, cfg.Nproc)
	exits := make(chan rankExit, cfg.Nproc)
	ready := make(chan int, cfg.Nproc)
	var wg sync.WaitGroup
	defer wg.Wait()
	for i := range ranks {
		r, err := startRank(exe, cfg.Args, envs[i], i, stdout, stderr, ready, exits, &wg)
		if err != nil {
			for _, s := range ranks[:i] {
				s.cmd.Process.Kill()
			}
			return err
		}
		ranks[i] = r
	}
	pids := make([]string, cfg.Nproc)
	for i, r := range ranks {
		pids[i] = fmt.Sprintf("rank %d pid %d", i, r.cmd.Process.Pid)
	}
	fmt.Fprintf(stderr, "posttrainllm: started %d ranks (%s backend): %s\n", cfg.Nproc, backendOf(cfg.Device), strings.Join(pids, ", "))
	return supervise(ranks, stderr, ready, exits, sigs, b)
}

// lockedWriter is a writer that several goroutines may write to: each
// Write holds a lock. It has no ReadFrom, so io.Copy into it writes what
// it reads piece by piece, under the lock.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

// Write writes p to the underlying writer under the lock.
func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// orDiscard is w, or io.Discard when w is nil.
func orDiscard(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
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

// backendOf names the backend Run configures for device.
func backendOf(device string) string {
	if device == "gpu" {
		return "nccl"
	}
	return "ring"
}
