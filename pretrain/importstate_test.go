package pretrain

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/posttrainllm/posttrainllm/checkpoint"
	"github.com/posttrainllm/posttrainllm/internal/runtest"
	"github.com/posttrainllm/posttrainllm/mlx"
	"github.com/posttrainllm/posttrainllm/model"
	"github.com/posttrainllm/posttrainllm/train"
)

// A step-0 checkpoint without optimizer state (what import writes)
// resumes exactly as one holding the optimizer's fresh state: the same
// losses at every step, and the state saved with the first checkpoint.
// Only step 0 may leave the state out.
func TestStepZeroWithoutOptimizerState(t *testing.T) {
	cfg := runtest.TinyConfig().WithDefaults()
	cfg.Steps = 6
	m, err := model.New(cfg.Model)
	if err != nil {
		t.Fatal(err)
	}
	names := make([]string, len(m.Specs))
	for i, s := range m.Specs {
		names[i] = s.Name
	}
	var cks [2]string
	err = mlx.Do(func() error {
		params, err := m.Init(3)
		if err != nil {
			return err
		}
		opt, err := train.NewOptimizer(cfg, m.Specs)
		if err != nil {
			return err
		}
		fresh, err := opt.Init()
		if err != nil {
			return err
		}
		for i, st := range [][]*mlx.Array{fresh, nil} {
			var stateNames []string
			if st != nil {
				stateNames = opt.StateNames()
			}
			dir := filepath.Join(t.TempDir(), "run")
			if cks[i], err = train.SaveCheckpoint(checkpoint.Root(dir), train.RunState{Config: cfg}, names, params, stateNames, st); err != nil {
				return err
			}
		}
		_, err = train.SaveCheckpoint(checkpoint.Root(t.TempDir()), train.RunState{Step: 3, Config: cfg}, names, params, nil, nil)
		if err == nil || !strings.Contains(err.Error(), "step 3 without optimizer state") {
			t.Errorf("saving step 3 without optimizer state: %v, want an error", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(cks[1], checkpoint.OptimizerFile)); err == nil {
		t.Fatalf("a checkpoint saved without optimizer state has %s", checkpoint.OptimizerFile)
	}
	_, want := runTrainer(t, cfg, checkpoint.RunDirOf(cks[0]), cks[0])
	_, got := runTrainer(t, cfg, checkpoint.RunDirOf(cks[1]), cks[1])
	if len(got) != cfg.Steps || len(want) != cfg.Steps {
		t.Fatalf("%d and %d metrics lines, want %d", len(got), len(want), cfg.Steps)
	}
	for i := range want {
		if got[i].Loss != want[i].Loss {
			t.Fatalf("step %d: loss %.7f without saved state, %.7f with the fresh state saved", want[i].Step, got[i].Loss, want[i].Loss)
		}
	}
	last, err := checkpoint.Latest(checkpoint.RunDirOf(cks[1]))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(last, checkpoint.OptimizerFile)); err != nil || last == cks[1] {
		t.Fatalf("the resumed run's last checkpoint %s has no optimizer state: %v", last, err)
	}
	// A later checkpoint that lost its optimizer file is an error, not a
	// fresh start.
	if err := os.Remove(filepath.Join(last, checkpoint.OptimizerFile)); err != nil {
		t.Fatal(err)
	}
	if _, err := train.LoadCheckpoint(last); err == nil || !strings.Contains(err.Error(), checkpoint.OptimizerFile) {
		t.Fatalf("loading step %s without its optimizer file: %v, want an error naming it", last, err)
	}
}
