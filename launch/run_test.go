package launch

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

// Run gives each rank its own environment (rank 0 here checks its rank
// and the ring's hostfile) and passes rank 0's stdout on; the others'
// stdout is not shown.
func TestRunRankEnvironment(t *testing.T) {
	var stdout, stderr bytes.Buffer
	script := `echo ready >&3; test -s "$MLX_HOSTFILE" || exit 4; echo "rank=$MLX_RANK"`
	err := Run(Config{Nproc: 3, Exe: "/bin/sh", Args: []string{"-c", script}, Stdout: &stdout, Stderr: &stderr})
	if err != nil {
		t.Fatalf("Run = %v\nstderr:\n%s", err, stderr.String())
	}
	if got := stdout.String(); got != "rank=0\n" {
		t.Errorf("stdout = %q, want rank 0's line alone", got)
	}
	if !strings.Contains(stderr.String(), "started 3 ranks (ring backend): rank 0 pid") {
		t.Errorf("stderr does not name the ranks:\n%s", stderr.String())
	}
}

// Rank 0's exit status comes back as an *ExitError; a rank that is not
// rank 0 failing is named with its exit status.
func TestRunExitStatuses(t *testing.T) {
	err := Run(Config{Nproc: 2, Exe: "/bin/sh", Args: []string{"-c", `echo ready >&3; [ "$MLX_RANK" = 0 ] && exit 5; exec sleep 600`}})
	var ee *ExitError
	if !errors.As(err, &ee) || ee.Code != 5 {
		t.Fatalf("Run = %v, want an *ExitError with code 5", err)
	}
	err = Run(Config{Nproc: 2, Exe: "/bin/sh",
		Args: []string{"-c", `echo ready >&3; [ "$MLX_RANK" = 1 ] && exit 7; exec sleep 600`}})
	if err == nil || !strings.Contains(err.Error(), "rank 1 of 2 exited with status 7") {
		t.Fatalf("Run = %v, want an error naming rank 1 and its status", err)
	}
}

// Run refuses fewer than one rank and starts nothing.
func TestRunBadNproc(t *testing.T) {
	err := Run(Config{Nproc: 0, Exe: "/bin/false"})
	if err == nil || !strings.Contains(err.Error(), "0 ranks") {
		t.Fatalf("Run with 0 ranks = %v, want an error naming the count", err)
	}
}
