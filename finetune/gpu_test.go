//go:build gpu

package finetune

import (
	"math"
	"testing"

	"github.com/posttrainllm/posttrainllm/internal/mlxtest"
	"github.com/posttrainllm/posttrainllm/mlx"
	"github.com/posttrainllm/posttrainllm/peft"
)

// TestGPUPreferenceStepMatchesCPU runs six LoRA DPO updates (accumulation
// 2, clipping, the adapter-off reference in the same step) on the CPU and
// on the GPU from the same base and adapters: the GPU's losses and its
// rewards, margins and accuracies must follow the CPU's, in one trace.
func TestGPUPreferenceStepMatchesCPU(t *testing.T) {
	mlxtest.RequireGPU(t)
	m, xs, ys, mask := prefFixture(t)
	run := func(t testing.TB, device string) (losses []float64, aux [][]float64) {
		if err := mlx.UseDevice(device); err != nil {
			t.Fatal(err)
		}
		defer mlx.UseDevice("cpu")
		a, err := peft.New(peft.Config{Method: peft.LoRA, Rank: 2, Alpha: 4, Targets: []string{"attn", "mlp"}}, m.Specs)
		if err != nil {
			t.Fatal(err)
		}
		base, _ := m.Init(1)
		s, st := adapterDPOState(t, m, a, base, randomAdapter(t, a, base))
		for i := 0; i < 6; i++ {
			loss, err := st.Update(1e-2, rowBatch(xs, ys, mask, 2, nil))
			if err != nil {
				t.Fatal(err)
			}
			stats, _ := st.Stats()
			losses, aux = append(losses, loss), append(aux, stats.Aux)
		}
		if s.Traces() != 1 {
			t.Errorf("%s: %d traces over 6 updates, want 1", device, s.Traces())
		}
		return losses, aux
	}
	mlxtest.Run(t, func(t testing.TB) {
		cpuLoss, cpuAux := run(t, "cpu")
		gpuLoss, gpuAux := run(t, "gpu")
		near := func(g, c float64) bool { return math.Abs(g-c) <= 1e-2*math.Max(1, math.Abs(c)) }
		for i := range cpuLoss {
			if !near(gpuLoss[i], cpuLoss[i]) {
				t.Fatalf("update %d: GPU DPO loss %.6f, CPU %.6f", i+1, gpuLoss[i], cpuLoss[i])
			}
			for k := range cpuAux[i] {
				if !near(gpuAux[i][k], cpuAux[i][k]) {
					t.Fatalf("update %d: GPU %s %.6f, CPU %.6f", i+1, PreferenceAux[k], gpuAux[i][k], cpuAux[i][k])
				}
			}
		}
		if cpuLoss[5] >= cpuLoss[0] {
			t.Fatalf("CPU DPO loss rose from %.4f to %.4f over 6 updates on the same pairs", cpuLoss[0], cpuLoss[5])
		}
	})
}
