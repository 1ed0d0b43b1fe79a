package launch

import (
	"fmt"
	"os"
	"strconv"

	"github.com/posttrainllm/posttrainllm/mlx"
)

// ReadyFDEnv names the file descriptor on which a rank that Run started
// reports that it joined its group (Join writes "ready" there), so that
// the supervisor can end ranks that never connect.
const ReadyFDEnv = "POSTTRAINLLM_READY_FD"

// InRank reports whether this process was started as one rank of a group:
// MLX_RANK is set, by Run, by mlx.launch or by hand.
func InRank() bool { return os.Getenv("MLX_RANK") != "" }

// BackendError is Join's and Backend's error when MLX_RANK is set but
// neither backend's variables are: the environment, not the program, is
// wrong, so a command reports it as a usage error.
type BackendError struct {
	// Rank is MLX_RANK's value.
	Rank string
}

// Error says which variables are missing.
func (e *BackendError) Error() string {
	return fmt.Sprintf("MLX_RANK=%s is set but neither MLX_HOSTFILE (ring backend) nor NCCL_HOST_IP (NCCL) is; "+
		"see docs/distributed.md", e.Rank)
}

// Backend picks the MLX backend a rank's environment configures:
// MLX_HOSTFILE is the ring's, NCCL_HOST_IP NCCL's. Without either it
// returns a *BackendError.
func Backend() (string, error) {
	switch {
	case os.Getenv("MLX_HOSTFILE") != "":
		return "ring", nil
	case os.Getenv("NCCL_HOST_IP") != "":
		return "nccl", nil
	}
	return "", &BackendError{Rank: os.Getenv("MLX_RANK")}
}

// Join connects this process to its group when it was started as a rank
// (InRank) and returns the group; otherwise it returns nil, nil. It tells a
// supervising parent that it connected (ReadyFDEnv).
func Join() (*mlx.Group, error) {
	if !InRank() {
		return nil, nil
	}
	backend, err := Backend()
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
	if fd := os.Getenv(ReadyFDEnv); fd != "" {
		n, err := strconv.Atoi(fd)
		if err != nil {
			return nil, fmt.Errorf("%s=%q: want a file descriptor number", ReadyFDEnv, fd)
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
