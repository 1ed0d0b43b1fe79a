//go:build gpu

// GPU tests: built only with -tags gpu (make test-gpu-bin) and run on a
// machine with a CUDA GPU and libmlx.so from mlx-cuda-13 (scripts/gpu-bench.sh).
// They fail, never skip, when no GPU is there.

package train

import (
	"math"
	"testing"

	"github.com/posttrainllm/posttrainllm/mlx"
)

func requireGPU(t *testing.T) {
	t.Helper()
	if !mlx.GPU.Available() {
		t.Fatal("no GPU: this libmlx.so has no CUDA backend or no device is visible (run with LD_LIBRARY_PATH at mlx-cuda-13's mlx/lib)")
	}
}

// TestGPUBenchMatchesCPU runs the same short bench (same seed, same
// batches of learnable text) on the CPU and the GPU, compiled and interpreted, with
// cosine and accum 2: the GPU's losses must follow the CPU's and the
// compiled step must trace once.
func TestGPUBenchMatchesCPU(t *testing.T) {
	lockThread(t)
	requireGPU(t)
	cfg := tinyConfig()
	cfg.Accum = 2
	opts := BenchOptions{Label: "gpu-test", Warmup: 1, Steps: 4,
		Data: memoryDataset(t, syntheticText(20_000), cfg.Model.Context)}
	// The CPU reference runs interpreted: the same losses as compiled (the
	// CPU suite checks that), without JIT-compiling kernels with g++ first.
	ref := cfg
	ref.Compile = false
	cpu, err := Bench(ref, opts)
	if err != nil {
		t.Fatalf("CPU bench: %v", err)
	}
	for _, compile := range []bool{true, false} {
		c := cfg
		c.Device, c.Compile = "gpu", compile
		got, err := Bench(c, opts)
		if err != nil {
			t.Fatalf("GPU bench (compile=%t): %v", compile, err)
		}
		if got.Device != "gpu" {
			t.Fatalf("bench reports device %q, want gpu", got.Device)
		}
		wantTraces := 1
		if !compile {
			wantTraces = opts.Warmup + opts.Steps
		}
		if got.Traces != wantTraces {
			t.Fatalf("compile=%t: %d traces, want %d", compile, got.Traces, wantTraces)
		}
		// float32 on the GPU may use TF32 matrix units; five updates of a
		// tiny model stay within 1e-2 of the CPU's loss.
		for _, p := range []struct {
			name      string
			got, want float64
		}{{"first loss", got.LossFirst, cpu.LossFirst}, {"last loss", got.LossLast, cpu.LossLast}} {
			if math.Abs(p.got-p.want) > 1e-2*math.Abs(p.want) {
				t.Fatalf("compile=%t: GPU %s %.5f, CPU %.5f: differ by more than 1%%", compile, p.name, p.got, p.want)
			}
		}
		if got.LossLast >= got.LossFirst {
			t.Fatalf("compile=%t: loss rose from %.4f to %.4f over %d updates", compile, got.LossFirst, got.LossLast, opts.Warmup+opts.Steps)
		}
		if got.PeakMemoryBytes == 0 {
			t.Fatalf("compile=%t: peak memory 0, want the GPU allocator's figure", compile)
		}
	}
}
