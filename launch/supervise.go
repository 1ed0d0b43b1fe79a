package launch

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

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

// startRank starts rank id and the goroutines that report when it
// connected (on ready) and when it ended (on exits).
func startRank(exe string, args, env []string, id int, stdout, stderr io.Writer,
	ready chan<- int, exits chan<- rankExit, wg *sync.WaitGroup) (*rank, error) {
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("--nproc: %w", err)
	}
	cmd := exec.Command(exe, args...)
	cmd.Env = append(append(os.Environ(), env...), ReadyFDEnv+"=3")
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
// they do not connect in time, or on a second signal (sigs carries the
// parent's SIGINT and SIGTERM).
func supervise(ranks []*rank, stderr io.Writer, ready <-chan int, exits <-chan rankExit, sigs <-chan os.Signal, b Bounds) error {
	connect := time.NewTimer(b.Connect)
	defer connect.Stop()
	var grace <-chan time.Time
	graceAfter := "rank 0 finished" // what started the grace period
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
				result = fmt.Errorf("--nproc: only %d of %d ranks connected to each other within %s; ended them", connected, len(ranks), b.Connect)
				killOthers(-1)
			}
		case <-grace:
			for _, r := range ranks {
				if !r.exited && result == nil {
					fmt.Fprintf(stderr, "posttrainllm: rank %d had not exited %s after %s; ended it\n", r.id, b.Grace, graceAfter)
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
				result = &ExitError{Code: 128 + int(sig.(syscall.Signal))}
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
				grace = time.After(b.Grace)
			case r.id == 0:
				// Rank 0 said why it stopped (or was interrupted and wrote
				// a checkpoint); the others write nothing.
				killOthers(0)
				result = rankZeroExit(e.err)
			case e.err != nil && signalled:
				// Rank 0 is stopping on the signal passed on to it: after
				// its step it leaves the group, so a peer's next collective
				// fails, possibly before rank 0's exit is seen here. Rank
				// 0's exit (its checkpoint, status 130) decides the run.
				if grace == nil {
					grace = time.After(b.Grace)
					graceAfter = fmt.Sprintf("rank %d left the interrupted run", r.id)
				}
			case e.err != nil:
				result = fmt.Errorf("rank %d of %d %s; ended the other ranks (rank 0 had %s to write a checkpoint), "+
					"the run folder's last checkpoint is intact%s", r.id, len(ranks), describeExit(e.err), b.Grace, r.stderr.quoted())
				// Rank 0 may checkpoint if it is not waiting in a collective
				// for the rank that died; then it is killed.
				killOthers(0)
				ranks[0].cmd.Process.Signal(syscall.SIGTERM)
				grace = time.After(b.Grace)
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
		return &ExitError{Code: ee.ExitCode()}
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

// Write keeps p, dropping what falls before the last max bytes.
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
