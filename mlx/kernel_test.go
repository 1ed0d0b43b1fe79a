package mlx

import (
	"strings"
	"testing"
)

// The CPU library has no CUDA backend: CUDAAvailable says so, and defining
// a kernel is an error naming the kernel, not a crash. A kernel without
// inputs or outputs is refused before MLX sees it.
func TestCUDAKernelOnTheCPULibrary(t *testing.T) {
	onMLX(t, func() {
		if CUDAAvailable() {
			t.Fatal("CUDAAvailable is true with the mlx-cpu library")
		}
		if _, err := NewCUDAKernel("ptlm_test_copy", []string{"x"}, []string{"y"}, "y[0] = x[0];", ""); err == nil ||
			!strings.Contains(err.Error(), "ptlm_test_copy") || !strings.Contains(err.Error(), "CUDA") {
			t.Fatalf("defining a CUDA kernel on the CPU library: err %v, want an error naming the kernel and CUDA", err)
		}
		if _, err := NewCUDAKernel("ptlm_test_none", []string{"x"}, nil, "", ""); err == nil || !strings.Contains(err.Error(), "0 outputs") {
			t.Fatalf("kernel without outputs: err %v, want one naming 0 outputs", err)
		}
	})
}
