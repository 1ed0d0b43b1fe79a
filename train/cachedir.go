package train

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/posttrainllm/posttrainllm/mlx"
)

// CacheDir is posttrainllm's folder in the user's cache directory
// (os.UserCacheDir: $XDG_CACHE_HOME or ~/.cache on Linux, ~/Library/Caches
// on macOS): what a run can always compute again but should not have to,
// MLX's compiled GPU kernels (kernels/) and probed micro-batch plans
// (plans/). Deleting it costs the next run its start-up time, nothing else.
func CacheDir() (string, error) {
	dir, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("cache folder: %w", err)
	}
	return filepath.Join(dir, "posttrainllm"), nil
}

// UseKernelCache keeps MLX's compiled GPU kernels in the kernels folder of
// CacheDir (mlx.UseKernelCache), so that only the first process on a
// machine compiles them, unless MLX_PTX_CACHE_DIR is set: then the user's
// folder stands. It returns the folder in effect, "" when the user has no
// cache directory (no $HOME), where MLX keeps its own default, a folder
// of the system's temporary directory. Call it before any GPU work.
func UseKernelCache() (string, error) {
	if v := os.Getenv(mlx.KernelCacheEnv); v != "" {
		return v, nil
	}
	dir, err := CacheDir()
	if err != nil {
		return "", nil
	}
	folder, _, err := mlx.UseKernelCache(filepath.Join(dir, "kernels"))
	return folder, err
}
