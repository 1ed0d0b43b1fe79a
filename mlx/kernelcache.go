package mlx

/*
#include <stdlib.h>
#include "bridge.h"
*/
import "C"

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"unsafe"
)

// KernelCacheEnv is the environment variable MLX's CUDA backend reads for
// the folder of its compiled kernels: each fused elementwise kernel,
// gather and scatter it compiles with NVRTC is kept there as a cubin and
// loaded from there by every later process. Unset, MLX keeps them in its
// folder of the system's temporary directory, which a new machine, a
// container or a cleaned /tmp starts without.
const KernelCacheEnv = "MLX_PTX_CACHE_DIR"

// Version returns the version of the loaded libmlx ("0.32.4").
func Version() (string, error) {
	var s *C.char
	if _, err := call(func() C.int { return C.ptlm_mlx_version(&s) }); err != nil {
		return "", check("version", err)
	}
	return C.GoString(s), nil
}

// Describe returns the device's name and architecture as MLX reports them
// ("NVIDIA H200", "sm_90"); either is "" where MLX does not say.
func (d Device) Describe() (name, arch string, err error) {
	if name, err = d.infoString("device_name"); err != nil {
		return "", "", err
	}
	if arch, err = d.infoString("architecture"); err != nil {
		return "", "", err
	}
	return name, arch, nil
}

// infoString returns the string property key of MLX's device_info for d.
func (d Device) infoString(key string) (string, error) {
	cKey := C.CString(key)
	defer C.free(unsafe.Pointer(cKey))
	var out *C.char
	if _, err := call(func() C.int { return C.ptlm_device_string(C.int(d), cKey, &out) }); err != nil {
		return "", check("device_info "+key, err)
	}
	defer C.free(unsafe.Pointer(out))
	return C.GoString(out), nil
}

// UseKernelCache makes dir hold MLX's compiled kernels (KernelCacheEnv)
// unless the variable is set already, in which case the user's choice
// stands. The kernels go into a folder of dir named by MLX's version and
// the GPU (KernelCacheFolder), because MLX names a cached kernel by its
// operation and shapes only: a folder shared between GPU architectures or
// MLX versions would hand one the other's code. It creates the folder and
// returns the folder in effect and whether it set the variable. MLX reads
// the variable once, at its first kernel compilation, so call it before
// any GPU work. On a build without a GPU it names the folder after the CPU;
// MLX's CPU backend does not read the variable.
func UseKernelCache(dir string) (folder string, set bool, err error) {
	if v, ok := os.LookupEnv(KernelCacheEnv); ok && v != "" {
		return v, false, nil
	}
	version, err := Version()
	if err != nil {
		return "", false, err
	}
	dev := CPU
	if GPU.Available() {
		dev = GPU
	}
	name, arch, err := dev.Describe()
	if err != nil {
		return "", false, err
	}
	if name == "" && arch == "" {
		name = dev.String()
	}
	folder = KernelCacheFolder(dir, version, name, arch)
	if err := os.MkdirAll(folder, 0o755); err != nil {
		return "", false, fmt.Errorf("mlx: kernel cache: %w (set %s to a writable folder)", err, KernelCacheEnv)
	}
	if err := os.Setenv(KernelCacheEnv, folder); err != nil {
		return "", false, fmt.Errorf("mlx: kernel cache: %w", err)
	}
	return folder, true, nil
}

// KernelCacheFolder is the folder of dir that UseKernelCache gives MLX
// version's kernels compiled for the device called name of architecture
// arch: dir/mlx-VERSION/NAME-ARCH, spaces and path separators in the
// names turned into dashes.
func KernelCacheFolder(dir, version, name, arch string) string {
	clean := strings.NewReplacer(" ", "-", "/", "-", "\\", "-", ":", "-")
	dev := clean.Replace(strings.TrimSpace(name))
	if arch != "" {
		dev += "-" + clean.Replace(arch)
	}
	return filepath.Join(dir, "mlx-"+clean.Replace(version), dev)
}
