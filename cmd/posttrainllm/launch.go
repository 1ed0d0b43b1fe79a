package main

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/posttrainllm/posttrainllm/launch"
	"github.com/posttrainllm/posttrainllm/mlx"
)

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
func rankEnv() bool { return launch.InRank() }

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

// joinGroup connects this process to its group when it was started as a
// rank (rankEnv) and returns the group; otherwise it returns nil. A rank
// environment without a backend is a usage error.
func joinGroup() (*mlx.Group, error) {
	g, err := launch.Join()
	var be *launch.BackendError
	if errors.As(err, &be) {
		return nil, &exitError{code: exitUsage, err: err}
	}
	return g, err
}

// launchRanks runs this command line again as nproc ranks (each with
// --nproc=1 and its rank's environment) and supervises them until every
// one has ended (see nprocHelp and package launch). The exit status is
// rank 0's, or 1 when another rank failed.
func launchRanks(stdout, stderr io.Writer, nproc int, device string) error {
	err := launch.Run(launch.Config{
		Nproc:  nproc,
		Device: device,
		Args:   append(append([]string{}, os.Args[1:]...), "--nproc=1"),
		Stdout: stdout,
		Stderr: stderr,
	})
	var ee *launch.ExitError
	if errors.As(err, &ee) {
		return &exitError{code: ee.Code}
	}
	return err
}

// rankOutput is where a rank's normal output goes: rank 0's to w, the
// others' nowhere (their errors still go to stderr).
func rankOutput(g *mlx.Group, w io.Writer) io.Writer {
	if g.Rank() != 0 {
		return io.Discard
	}
	return w
}

// nprocArg is the --nproc flag that starts a group of g's size again, or
// "" for a single process.
func nprocArg(g *mlx.Group) string {
	if g.Size() == 1 {
		return ""
	}
	return fmt.Sprintf(" --nproc %d", g.Size())
}
