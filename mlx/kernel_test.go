package mlx

import (
	"strings"
	"testing"
)

// A kernel can be defined exactly when the library has the CUDA backend:
// with mlx-cpu (CI) or mlx-metal the definition is an error naming the
// kernel and CUDA, not a crash. A kernel without inputs or outputs is
// refused before MLX sees it, whatever the library.
func TestCUDAKernelDefinitionFollowsTheLibrary(t *testing.T) {
	onMLX(t, func() {
		k, err := NewCUDAKernel("ptlm_test_copy", []string{"x"}, []string{"y"}, "y[0] = x[0];", "")
		if CUDAAvailable() {
			if err != nil {
				t.Fatalf("defining a CUDA kernel with the CUDA library: %v", err)
			}
			k.Free()
		} else if err == nil || !strings.Contains(err.Error(), "ptlm_test_copy") || !strings.Contains(err.Error(), "CUDA") {
			t.Fatalf("defining a CUDA kernel without the CUDA library: err %v, want an error naming the kernel and CUDA", err)
		}
		if _, err := NewCUDAKernel("ptlm_test_none", []string{"x"}, nil, "", ""); err == nil || !strings.Contains(err.Error(), "0 outputs") {
			t.Fatalf("kernel without outputs: err %v, want one naming 0 outputs", err)
		}
		if _, err := NewCUDAKernel("ptlm_test_none", nil, []string{"y"}, "", ""); err == nil || !strings.Contains(err.Error(), "0 inputs") {
			t.Fatalf("kernel without inputs: err %v, want one naming 0 inputs", err)
		}
	})
}
