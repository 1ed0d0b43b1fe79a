package pretrain

import (
	"context"
	"path/filepath"
	"slices"
	"testing"

	"github.com/posttrainllm/posttrainllm/internal/runtest"
	"github.com/posttrainllm/posttrainllm/internal/runtest/fixture"
	"github.com/posttrainllm/posttrainllm/mlx"
	"github.com/posttrainllm/posttrainllm/train"
)

// A run holds MLX's memory limit at its budget while it is open and puts
// the previous limit back when it ends; the limit changes when MLX waits,
// not what the updates compute.
func TestRunHoldsMemoryLimitAtBudget(t *testing.T) {
	cfg := runtest.TinyConfig()
	ds := memoryDataset(t, fixture.SyntheticText(60_000), cfg.Model.Context)
	before := mlx.MemoryLimit()
	losses := map[string][]float64{}
	for _, budget := range []string{"", "1MiB"} {
		cfg.MemoryBudget = budget
		want, err := cfg.MemoryBudgetBytes()
		if err != nil {
			t.Fatal(err)
		}
		tr, err := New(cfg, ds, t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		var during uint64
		tr.Hooks.OnStart = func(train.Start) { during = mlx.MemoryLimit() }
		if _, err := tr.Run(context.Background(), ""); err != nil {
			t.Fatal(err)
		}
		if during != want {
			t.Errorf("budget %q: MLX's memory limit during the run is %d, want the budget's %d bytes", budget, during, want)
		}
		if after := mlx.MemoryLimit(); after != before {
			t.Errorf("budget %q: MLX's memory limit after the run is %d, want the %d it was before", budget, after, before)
		}
		ms, err := train.ReadMetrics(filepath.Join(tr.RunDir, train.MetricsFile))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range ms {
			losses[budget] = append(losses[budget], m.Loss)
		}
	}
	if len(losses[""]) != cfg.Steps || !slices.Equal(losses[""], losses["1MiB"]) {
		t.Fatalf("losses with the default budget %v, within 1 MiB %v; want the same %d", losses[""], losses["1MiB"], cfg.Steps)
	}
}
