package pretrain

import (
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/posttrainllm/posttrainllm/checkpoint"
	"github.com/posttrainllm/posttrainllm/internal/runtest"
	"github.com/posttrainllm/posttrainllm/internal/runtest/fixture"
	"github.com/posttrainllm/posttrainllm/train"
)

// bestConfig evaluates after every update at a learning rate high enough
// for the held-out loss to stall, so that patience has something to stop.
func bestConfig() train.Config {
	cfg := runtest.TinyConfig()
	cfg.Steps, cfg.EvalEvery, cfg.EvalTokens = 40, 1, 128
	cfg.Schedule, cfg.LR, cfg.MinLR, cfg.Warmup = "constant", 0.1, 0, 0
	cfg.KeepBest, cfg.Patience = true, 3
	return cfg
}

// expectedStop replays the rule on a run's held-out losses: the step of
// the lowest loss, its value, and the step the run stops at (the first
// evaluation that is the patience-th in a row without a new lowest, or
// the last step).
func expectedStop(ms []train.Metrics, patience, steps int) (bestStep int, best float64, stop int) {
	best, since := math.Inf(1), 0
	for _, m := range ms {
		if m.ValLoss == nil {
			continue
		}
		if *m.ValLoss < best {
			best, bestStep, since = *m.ValLoss, m.Step, 0
		} else {
			since++
		}
		if since >= patience && m.Step < steps {
			return bestStep, best, m.Step
		}
	}
	return bestStep, best, steps
}

// --patience stops the run at the evaluation the rule says, with a
// checkpoint there; --keep-best keeps the checkpoint of the lowest
// held-out loss in RUN/best, the only one there; both carry over a
// resume: a run interrupted before the stop and resumed stops at the same
// step with the same best.
func TestKeepBestAndPatience(t *testing.T) {
	cfg := bestConfig()
	dir := t.TempDir()
	sum, ms := runTrainer(t, cfg, dir, "")
	bestStep, best, stop := expectedStop(ms, cfg.Patience, cfg.Steps)
	if stop == cfg.Steps {
		t.Fatalf("the held-out loss never went %d evaluations without improving over %d steps; the test needs a run that stalls", cfg.Patience, cfg.Steps)
	}
	t.Logf("held-out loss lowest at step %d (%.4f), early stop at step %d of %d", bestStep, best, stop, cfg.Steps)
	if !sum.EarlyStopped || sum.Step != stop || ms[len(ms)-1].Step != stop {
		t.Fatalf("run ended at step %d (early stop %v, last metrics line %d), want an early stop at step %d", sum.Step, sum.EarlyStopped, ms[len(ms)-1].Step, stop)
	}
	if sum.LastCheckpoint != filepath.Join(checkpoint.Root(dir), checkpoint.DirName(stop)) {
		t.Errorf("last checkpoint %s, want step %d's", sum.LastCheckpoint, stop)
	}
	if sum.Best == nil || sum.Best.Step != bestStep || sum.Best.ValLoss != best {
		t.Fatalf("summary's best %+v, want step %d at %g", sum.Best, bestStep, best)
	}
	dirs, err := checkpoint.List(checkpoint.BestRoot(dir))
	if err != nil || len(dirs) != 1 || dirs[0] != sum.Best.Checkpoint {
		t.Fatalf("best checkpoints %v (%v), want only %s", dirs, err, sum.Best.Checkpoint)
	}
	st, err := train.ReadRunState(filepath.Join(dirs[0], checkpoint.StateFile))
	if err != nil || st.Step != bestStep || st.Best == nil || st.Best.ValLoss != best {
		t.Fatalf("best checkpoint's state: step %d, best %+v (%v); want step %d at %g", st.Step, st.Best, err, bestStep, best)
	}

	// Interrupted before the stop (after the best, if the best came after
	// two updates) and resumed, the run takes the same decisions.
	cut := max(1, min(bestStep, stop-1))
	split := t.TempDir()
	part := interruptAt(t, cfg, split, cut)
	resumed, _ := runTrainer(t, cfg, split, part.LastCheckpoint)
	if !resumed.EarlyStopped || resumed.Step != stop || resumed.Best == nil || resumed.Best.Step != bestStep || resumed.Best.ValLoss != best {
		t.Fatalf("resumed after step %d: stopped at %d (early %v), best %+v; the whole run stopped at %d with best step %d at %g",
			cut, resumed.Step, resumed.EarlyStopped, resumed.Best, stop, bestStep, best)
	}
	if dirs, _ := checkpoint.List(checkpoint.BestRoot(split)); len(dirs) != 1 || filepath.Base(dirs[0]) != checkpoint.DirName(bestStep) {
		t.Errorf("resumed run's best checkpoints %v, want step %d's alone", dirs, bestStep)
	}
}

// Both settings follow the held-out loss: a run that evaluates none is
// refused before it trains.
func TestKeepBestNeedsEvaluation(t *testing.T) {
	cfg := bestConfig()
	cfg.EvalEvery = 0
	tr, err := New(cfg, memoryDataset(t, fixture.SyntheticText(20_000), cfg.Model.Context), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tr.Run(t.Context(), ""); err == nil || !strings.Contains(err.Error(), "eval_every 0") {
		t.Errorf("keep_best and patience without evaluations: %v", err)
	}
	cfg.Patience = -1
	if err := cfg.WithDefaults().Validate(); err == nil || !strings.Contains(err.Error(), "patience = -1") {
		t.Errorf("patience -1: %v", err)
	}
}
