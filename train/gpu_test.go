//go:build gpu

// GPU tests: built only with -tags gpu (make test-gpu-bin) and run on a
// machine with a CUDA GPU and libmlx.so from mlx-cuda-13 (scripts/gpu-bench.sh).
// They fail, never skip, when no GPU is there.

package train

import (
	"math"
	"strings"
	"testing"

	"github.com/posttrainllm/posttrainllm/internal/mlxtest"
	"github.com/posttrainllm/posttrainllm/internal/runtest/fixture"
	"github.com/posttrainllm/posttrainllm/mlx"
)

// TestGPUStepMatchesCPU runs the same updates (same seed, same batches of
// learnable text) on the CPU and the GPU, compiled and interpreted, with
// cosine and accum 2: the GPU's losses must follow the CPU's and the
// compiled step must trace once.
func TestGPUStepMatchesCPU(t *testing.T) {
	mlxtest.RequireGPU(t)
	cfg := tinyConfig()
	cfg.Accum, cfg.Steps, cfg.Warmup = 2, 5, 2 // a cosine schedule needs warm-up < steps
	ds := memoryDataset(t, fixture.SyntheticText(20_000), cfg.Model.Context)
	// The CPU reference runs interpreted: the same losses as compiled (the
	// CPU suite checks that), without JIT-compiling kernels with g++ first.
	ref := cfg
	ref.Compile = false
	cpu, _ := setupLosses(t, ref, ds)
	for _, compile := range []bool{true, false} {
		c := cfg
		// The CPU's plan, so the GPU accumulates too rather than running
		// one probed pass.
		c.Device, c.Compile, c.MicroBatch = "gpu", compile, cfg.Batch
		mlx.ResetPeakMemory()
		got, traces := setupLosses(t, c, ds)
		var dev mlx.Device
		mlx.Do(func() error { dev = mlx.DefaultDevice(); return nil }) // the MLX thread's device
		if dev != mlx.GPU {
			t.Fatalf("compile=%t: the updates ran on %v, want the GPU", compile, dev)
		}
		wantTraces := 1
		if !compile {
			wantTraces = cfg.Steps
		}
		if traces != wantTraces {
			t.Fatalf("compile=%t: %d traces, want %d", compile, traces, wantTraces)
		}
		// float32 on the GPU may use TF32 matrix units; five updates of a
		// tiny model stay within 1e-2 of the CPU's loss.
		for i := range got {
			if math.Abs(got[i]-cpu[i]) > 1e-2*math.Abs(cpu[i]) {
				t.Fatalf("compile=%t: update %d: GPU loss %.5f, CPU %.5f: differ by more than 1%%", compile, i+1, got[i], cpu[i])
			}
		}
		if got[len(got)-1] >= got[0] {
			t.Fatalf("compile=%t: loss rose from %.4f to %.4f over %d updates", compile, got[0], got[len(got)-1], len(got))
		}
		if mlx.Memory().Peak == 0 {
			t.Fatalf("compile=%t: peak memory 0, want the GPU allocator's figure", compile)
		}
	}
}

// On a GPU an automatic plan is probed: with memory to spare, tiny's
// batch 2 × accum 4 runs as one pass of 8 sequences, whose measured peak
// is within the budget; a budget below one sequence's lower bound is an
// error that names it.
func TestGPUChoosePlanProbes(t *testing.T) {
	mlxtest.RequireGPU(t)
	cfg := tinyConfig()
	cfg.Device, cfg.Batch, cfg.Accum, cfg.MemoryBudget = "gpu", 2, 4, "1GiB"
	cfg, m, err := Prepare(cfg)
	if err != nil {
		t.Fatal(err)
	}
	p, err := ChoosePlan(cfg, m)
	if err != nil {
		t.Fatal(err)
	}
	if p.How != PlanProbed || p.MicroBatch != 8 || p.Steps != 1 || p.PeakBytes == 0 || p.PeakBytes > 1<<30 || p.BudgetBytes != 1<<30 {
		t.Fatalf("plan %+v: want a probed micro-batch 8 × 1 within 1 GiB", p)
	}
	cfg.MemoryBudget = "1KiB"
	if _, err := ChoosePlan(cfg, m); err == nil || !strings.Contains(err.Error(), "no micro-batch fits the memory budget of 1.0 KiB") {
		t.Fatalf("1 KiB budget: %v, want an error naming it", err)
	}
}
