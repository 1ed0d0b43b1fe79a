package mlx

import (
	"strings"
	"testing"
)

func TestDevices(t *testing.T) {
	onMLX(t, func() {
		if !CPU.Available() {
			t.Fatal("the CPU device is not available")
		}
		if err := SetDefaultDevice(CPU); err != nil {
			t.Fatalf("SetDefaultDevice(CPU): %v", err)
		}
		if d := DefaultDevice(); d != CPU {
			t.Fatalf("default device %v, want cpu", d)
		}
		// The mlx-cpu build has no GPU, and asking for one says so clearly. Run
		// against the CUDA wheel's libmlx, the GPU must be usable instead.
		if GPU.Available() {
			if err := SetDefaultDevice(GPU); err != nil {
				t.Fatalf("GPU is available but SetDefaultDevice(GPU): %v", err)
			}
			if d := DefaultDevice(); d != GPU {
				t.Fatalf("default device %v after SetDefaultDevice(GPU)", d)
			}
			if err := SetDefaultDevice(CPU); err != nil {
				t.Fatal(err)
			}
		} else {
			err := SetDefaultDevice(GPU)
			if err == nil || !strings.Contains(err.Error(), "gpu") || !strings.Contains(err.Error(), "not available") {
				t.Fatalf("SetDefaultDevice(GPU) on a CPU-only build gave %v, want a clear not-available error", err)
			}
		}
		if d := DefaultDevice(); d != CPU {
			t.Fatalf("default device %v, want cpu", d)
		}
		checkClose(t, "still computes", AddScalar(Ones([]int{2}, Float32), 1), []int{2}, []float64{2, 2}, 0)
		if err := Synchronize(); err != nil {
			t.Fatalf("Synchronize: %v", err)
		}
		for name, want := range map[string]Device{"cpu": CPU, "gpu": GPU, "cuda": GPU} {
			if d, err := ParseDevice(name); err != nil || d != want {
				t.Fatalf("ParseDevice(%q) = %v, %v", name, d, err)
			}
		}
		if _, err := ParseDevice("tpu"); err == nil {
			t.Fatal("ParseDevice(tpu) succeeded")
		}
		if CPU.String() != "cpu" || GPU.String() != "gpu" {
			t.Fatalf("device names %q, %q", CPU, GPU)
		}
	})
}

// Asking for the CPU's memory works; MLX 0.32 answers 0 (it does not size
// the CPU device), and a later version's answer must be the machine's RAM.
func TestDeviceMemory(t *testing.T) {
	n, err := CPU.Memory() // from the test's goroutine: handed to the MLX thread
	if err != nil {
		t.Fatal(err)
	}
	if n != 0 && n < 1<<30 {
		t.Fatalf("CPU memory %d bytes, want 0 or the machine's RAM", n)
	}
}
