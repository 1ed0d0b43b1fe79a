package pretrain

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/posttrainllm/posttrainllm/checkpoint"
	"github.com/posttrainllm/posttrainllm/internal/runtest"
	"github.com/posttrainllm/posttrainllm/mlx"
)

// A GaLore run refreshes its projections every galore_gap updates without
// tracing the step again, learns, and saves the projections in its
// checkpoint so a resumed run continues with them.
func TestGaLoreRunRefreshesWithoutRetracing(t *testing.T) {
	cfg := runtest.TinyConfig()
	cfg.Optimizer, cfg.GaLoreRank, cfg.GaLoreGap, cfg.GaLoreScale = "galore", 8, 3, 1
	cfg.Steps, cfg.Accum = 8, 2
	dir := t.TempDir()
	sum, ms := runTrainer(t, cfg, dir, "")
	if sum.Traces != 1 {
		t.Fatalf("step traced %d times across refreshes at steps 0, 3 and 6, want 1", sum.Traces)
	}
	if !(ms[len(ms)-1].Loss < ms[0].Loss) {
		t.Fatalf("loss did not fall: first %g, last %g", ms[0].Loss, ms[len(ms)-1].Loss)
	}
	ck, err := checkpoint.Latest(dir)
	if err != nil {
		t.Fatal(err)
	}
	arrs, _, err := mlx.LoadSafetensors(filepath.Join(ck, checkpoint.OptimizerFile))
	if err != nil {
		t.Fatal(err)
	}
	projections := 0
	for name, a := range arrs {
		if !strings.HasSuffix(name, ".galore_proj") {
			continue
		}
		projections++
		// A refreshed projection is no longer the initial identity
		// columns: its first column has more than one non-zero entry.
		err := mlx.Do(func() error {
			f, err := a.Float32s()
			if err != nil {
				return err
			}
			r := a.Shape()[1]
			nonzero := 0
			for i := 0; i < a.Shape()[0]; i++ {
				if f[i*r] != 0 {
					nonzero++
				}
			}
			if nonzero < 2 {
				t.Errorf("%s still has the initial identity column (%d non-zero entries)", name, nonzero)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if projections == 0 {
		t.Fatalf("checkpoint %s holds no GaLore projections", ck)
	}
	cfg.Steps = 10
	sum, _ = runTrainer(t, cfg, dir, ck)
	if sum.Step != 10 || sum.Traces != 1 {
		t.Fatalf("resumed run ended at step %d with %d traces, want step 10 and 1 trace", sum.Step, sum.Traces)
	}
}

func TestGaLoreRankAboveEveryMatrixIsRefused(t *testing.T) {
	cfg := runtest.TinyConfig()
	cfg.Optimizer, cfg.GaLoreRank = "galore", 64 // d_model is 32
	err := cfg.WithDefaults().Validate()
	if err == nil || !strings.Contains(err.Error(), "galore_rank = 64 is above") {
		t.Fatalf("NewOptimizer with galore rank 64 on a d_model 32 model = %v, want a rank error", err)
	}
}
