package launch

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// superviseShells runs supervise over ranks that are shell scripts, one per
// rank: a rank reports that it connected with `echo ready >&3`. The
// timeout detects a hang of the supervisor; it measures no speed.
func superviseShells(t *testing.T, b Bounds, scripts ...string) error {
	t.Helper()
	return superviseSignalled(t, b, nil, scripts...)
}

// superviseSignalled is superviseShells with the parent's signals read from
// sigs.
func superviseSignalled(t *testing.T, b Bounds, sigs <-chan os.Signal, scripts ...string) error {
	t.Helper()
	ranks := make([]*rank, len(scripts))
	exits := make(chan rankExit, len(scripts))
	ready := make(chan int, len(scripts))
	var wg sync.WaitGroup
	for i, s := range scripts {
		r, err := startRank("/bin/sh", []string{"-c", s}, nil, i, io.Discard, io.Discard, ready, exits, &wg)
		if err != nil {
			t.Fatal(err)
		}
		ranks[i] = r
	}
	done := make(chan error, 1)
	go func() { done <- supervise(ranks, io.Discard, ready, exits, sigs, b) }()
	select {
	case err := <-done:
		wg.Wait()
		for _, r := range ranks {
			if r.cmd.ProcessState == nil {
				t.Errorf("rank %d was not waited for", r.id)
			}
		}
		return err
	case <-time.After(2 * time.Minute):
		for _, r := range ranks {
			r.cmd.Process.Kill()
		}
		t.Fatal("supervise did not return: the ranks hang")
		return nil
	}
}

const (
	connects  = "echo ready >&3; exec sleep 600"
	neverSeen = "exec sleep 600"
)

// Ranks that never connect are ended after the connect bound.
func TestSuperviseEndsRanksThatDoNotConnect(t *testing.T) {
	err := superviseShells(t, Bounds{Connect: 300 * time.Millisecond, Grace: time.Second}, connects, neverSeen)
	if err == nil || !strings.Contains(err.Error(), "only 1 of 2 ranks connected") {
		t.Fatalf("supervise = %v, want an error saying 1 of 2 ranks connected", err)
	}
}

// A failing rank other than 0 ends the run with an error naming it and
// quoting its stderr; rank 0 is ended after the grace period.
func TestSuperviseNamesFailedRank(t *testing.T) {
	err := superviseShells(t, Bounds{Connect: time.Minute, Grace: 300 * time.Millisecond},
		connects, connects, "echo ready >&3; echo 'out of memory' >&2; exit 3")
	if err == nil {
		t.Fatal("supervise = nil, want the failure of rank 2")
	}
	for _, want := range []string{"rank 2 of 3 exited with status 3", "out of memory", "checkpoint is intact"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("supervise error %q does not say %q", err, want)
		}
	}
}

// A failing rank 0 passes its exit status on and ends the others.
func TestSuperviseKeepsRankZeroStatus(t *testing.T) {
	err := superviseShells(t, Bounds{Connect: time.Minute, Grace: time.Minute}, "exit 2", connects)
	var ee *ExitError
	if !errors.As(err, &ee) || ee.Code != 2 {
		t.Fatalf("supervise = %v, want exit status 2 without a message of its own (rank 0 printed it)", err)
	}
}

// Every rank finishing is success.
func TestSuperviseAllFinish(t *testing.T) {
	if err := superviseShells(t, Bounds{Connect: time.Minute, Grace: time.Minute}, "echo ready >&3", "echo ready >&3"); err != nil {
		t.Fatalf("supervise = %v, want nil", err)
	}
}

// An interrupt goes to rank 0, which finishes its step and exits 130; a
// peer whose collective then fails because rank 0 left may exit first, and
// the run still ends with rank 0's status, not as that peer's failure.
func TestSuperviseInterruptedPeerFailingFirst(t *testing.T) {
	dir := t.TempDir()
	trapped, left := filepath.Join(dir, "trapped"), filepath.Join(dir, "left")
	rank0 := "trap 'touch " + left + "; sleep 0.5; exit 130' INT; touch " + trapped + "; echo ready >&3; while :; do sleep 0.05; done"
	rank1 := "echo ready >&3; while [ ! -e " + left + " ]; do sleep 0.02; done; echo 'connection to a peer was lost' >&2; exit 1"
	sigs := make(chan os.Signal, 2)
	go func() {
		for _, err := os.Stat(trapped); err != nil; _, err = os.Stat(trapped) {
			time.Sleep(10 * time.Millisecond)
		}
		sigs <- syscall.SIGINT
	}()
	err := superviseSignalled(t, Bounds{Connect: time.Minute, Grace: time.Minute}, sigs, rank0, rank1)
	var ee *ExitError
	if !errors.As(err, &ee) || ee.Code != 130 {
		t.Fatalf("supervise = %v, want rank 0's exit status 130", err)
	}
}
