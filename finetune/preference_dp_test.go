package finetune

import (
	"bytes"
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/posttrainllm/posttrainllm/internal/runtest/fixture"
	"github.com/posttrainllm/posttrainllm/mlx"
	"github.com/posttrainllm/posttrainllm/step"
)

// rowRankOutEnv names the folder where a rank of
// TestRowStepDataParallelMatchesUnion writes its results.
const rowRankOutEnv = "PTLM_TEST_DP_ROWS_OUT"

// rowGroupRun runs 3 DPO updates of a full fine-tune on the fixture's
// pairs (all of them for a nil group, rank r's half in a group of two,
// whose row weights are normalised by the union's pair count) and
// returns each update's loss and metrics, then the final parameters.
func rowGroupRun(t testing.TB, g *mlx.Group) []float64 {
	t.Helper()
	m, xs, ys, mask := prefFixture(t)
	ref := []float32{-20, -21, -19.5, -22, -18, -20.5, -21, -19}
	var out []float64
	err := mlx.Do(func() error {
		params, err := m.Init(1)
		if err != nil {
			return err
		}
		opt := plainSGD(t, m)
		state, _ := opt.Init()
		s, err := step.NewStep(PreferenceLoss(m, Preference{Objective: DPO, Beta: 0.5}), opt, step.Layout{Trainable: len(m.Specs), Frozen: 0, State: len(state), Inputs: step.RowInputs, RowInputs: 1, Aux: PreferenceAux}, step.StepOptions{Accum: 2, GradClip: 0.05, Compile: true, Group: g})
		if err != nil {
			return err
		}
		defer s.Free()
		st, err := step.NewState(s, params, state)
		if err != nil {
			return err
		}
		defer st.Free()
		b := step.Batch{X: xs, Y: ys, W: mask, RowW: pairWeights(8), RowInputs: [][]float32{ref}, N: 2, B: 4, T: 6}
		if g.Size() == 2 { // rank r takes rows 4r … 4r+3: two pairs, one per microbatch
			r := g.Rank()
			b = step.Batch{X: xs[24*r : 24*r+24], Y: ys[24*r : 24*r+24], W: mask[24*r : 24*r+24], RowW: pairWeights(4),
				RowInputs: [][]float32{ref[4*r : 4*r+4]}, N: 2, B: 2, T: 6, WeightSum: 4}
		}
		for i := 0; i < 3; i++ {
			loss, err := st.Update(0.5, b)
			if err != nil {
				return err
			}
			stats, _ := st.Stats()
			out = append(append(out, loss), stats.Aux...)
		}
		for _, p := range st.Params() {
			v, err := p.Float32s()
			if err != nil {
				return err
			}
			out = append(out, f64(v)...)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// Two ranks with two pairs each, over a loopback ring, report the loss
// and metrics of the union's four pairs and end with its parameters,
// clipped by the union's gradient norm: the row weights are normalised by
// the global pair count (Batch.WeightSum) and the step all-reduces the
// metric sums with the gradients.
func TestRowStepDataParallelMatchesUnion(t *testing.T) {
	want := rowGroupRun(t, nil)
	dir := t.TempDir()
	fixture.RunRanks(t, 2, "TestHelperRowStepRank", rowRankOutEnv+"="+dir)
	for r := 0; r < 2; r++ {
		b, err := os.ReadFile(filepath.Join(dir, "rows-rank-"+strconv.Itoa(r)))
		if err != nil {
			t.Fatal(err)
		}
		got := make([]float64, len(b)/8)
		if err := binary.Read(bytes.NewReader(b), binary.LittleEndian, got); err != nil {
			t.Fatal(err)
		}
		if len(got) != len(want) {
			t.Fatalf("rank %d reported %d values, want %d", r, len(got), len(want))
		}
		for i := range got {
			if math.Abs(got[i]-want[i]) > 2e-5*math.Max(1, math.Abs(want[i])) {
				what := "parameter"
				if i < 15 {
					what = []string{"loss", "reward_chosen", "reward_rejected", "margin", "accuracy"}[i%5]
				}
				t.Fatalf("rank %d value %d (%s): %.7g, the union's %.7g", r, i, what, got[i], want[i])
			}
		}
	}
}

// TestHelperRowStepRank is one rank of TestRowStepDataParallelMatchesUnion;
// run directly it does nothing.
func TestHelperRowStepRank(t *testing.T) {
	dir := os.Getenv(rowRankOutEnv)
	if dir == "" {
		return
	}
	g, err := fixture.InitRing()
	if err != nil {
		t.Fatal(err)
	}
	out := rowGroupRun(t, g)
	var b bytes.Buffer
	binary.Write(&b, binary.LittleEndian, out)
	if err := os.WriteFile(filepath.Join(dir, "rows-rank-"+strconv.Itoa(g.Rank())), b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}
