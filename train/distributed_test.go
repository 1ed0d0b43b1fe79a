package train

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/posttrainllm/posttrainllm/data"
	"github.com/posttrainllm/posttrainllm/internal/runtest/fixture"
	"github.com/posttrainllm/posttrainllm/mlx"
)

// rankOutEnv names the folder where a process that
// TestDataParallelMatchesDoubledBatch started writes its results as one
// rank of a loopback ring.
const rankOutEnv = "PTLM_TEST_DP_OUT"

// dataParallelConfig is the run both sides of the equivalence test train:
// AdamW with clipping (the global norm must be that of the averaged
// gradients) and two accumulated microbatches (the all-reduce follows the
// accumulation).
func dataParallelConfig() Config {
	cfg := tinyConfig()
	cfg.Steps, cfg.Batch, cfg.Accum, cfg.Warmup, cfg.GradClip = 4, 2, 2, 2, 0.5
	return cfg
}

// groupRun runs cfg.Steps updates of rank g.Rank() of a data-parallel run
// (a nil group is one process) on its shard of ds's windows, and returns
// the losses the step reports and the final parameters, flattened in the
// model's order.
func groupRun(t testing.TB, cfg Config, ds *testData, g *mlx.Group) (losses []float64, traces int, params []float32) {
	t.Helper()
	cfg, m, err := Prepare(cfg)
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewGroupSetup(cfg, m, "", g)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Free()
	sampler, err := data.NewSampler(ds.Train, cfg.Model.Context, cfg.Seed)
	if err != nil {
		t.Fatal(err)
	}
	if err := sampler.Shard(g.Rank(), g.Size(), cfg.Batch); err != nil {
		t.Fatal(err)
	}
	losses = runUpdates(t, s, sampler)
	err = mlx.Do(func() error {
		sc := mlx.NewScope()
		defer sc.Close()
		flat := make([]*mlx.Array, len(s.State.Params()))
		for i, p := range s.State.Params() {
			flat[i] = mlx.Reshape(mlx.AsType(p, mlx.Float32), -1)
		}
		var err error
		params, err = mlx.Concatenate(flat, 0).Float32s()
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return losses, s.Step.Traces(), params
}

// Two ranks over a loopback ring, batch B each, end k steps with the
// parameters of one process with batch 2B (float tolerance: the sums run
// in another order), report its losses, and agree with each other exactly.
func TestDataParallelMatchesDoubledBatch(t *testing.T) {
	cfg := dataParallelConfig()
	ds := memoryDataset(t, fixture.SyntheticText(30_000), cfg.Model.Context)
	single := cfg
	single.Batch *= 2
	wantLosses, _, wantParams := groupRun(t, single, ds, nil)

	dir := t.TempDir()
	fixture.RunRanks(t, 2, "TestHelperDataParallelRank", rankOutEnv+"="+dir)
	var ranks [2][]float32
	for r := range ranks {
		losses, params := readRankResult(t, dir, r)
		ranks[r] = params
		if len(losses) != len(wantLosses) {
			t.Fatalf("rank %d reported %d losses, want %d", r, len(losses), len(wantLosses))
		}
		for i := range losses {
			if math.Abs(losses[i]-wantLosses[i]) > 1e-5*math.Max(1, math.Abs(wantLosses[i])) {
				t.Errorf("rank %d step %d: loss %.7f, want the doubled batch's %.7f", r, i+1, losses[i], wantLosses[i])
			}
		}
		if len(params) != len(wantParams) {
			t.Fatalf("rank %d has %d parameters, want %d", r, len(params), len(wantParams))
		}
		worst, at := 0.0, 0
		for i := range params {
			if d := math.Abs(float64(params[i] - wantParams[i])); d > worst {
				worst, at = d, i
			}
		}
		if worst > 2e-5 {
			t.Errorf("rank %d: parameter %d is %g, the doubled batch's %g (largest difference %g)", r, at, params[at], wantParams[at], worst)
		}
	}
	for i := range ranks[0] {
		if ranks[0][i] != ranks[1][i] {
			t.Fatalf("parameter %d: rank 0 has %g, rank 1 %g; the ranks must apply the same update", i, ranks[0][i], ranks[1][i])
		}
	}
}

// TestHelperDataParallelRank is one rank of
// TestDataParallelMatchesDoubledBatch; run directly it does nothing.
func TestHelperDataParallelRank(t *testing.T) {
	dir := os.Getenv(rankOutEnv)
	if dir == "" {
		return
	}
	g, err := fixture.InitRing()
	if err != nil {
		t.Fatal(err)
	}
	cfg := dataParallelConfig()
	ds := memoryDataset(t, fixture.SyntheticText(30_000), cfg.Model.Context)
	losses, traces, params := groupRun(t, cfg, ds, g)
	if traces != 1 {
		t.Fatalf("rank %d: step traced %d times, want 1", g.Rank(), traces)
	}
	var b bytes.Buffer
	binary.Write(&b, binary.LittleEndian, int64(len(losses)))
	binary.Write(&b, binary.LittleEndian, losses)
	binary.Write(&b, binary.LittleEndian, params)
	if err := os.WriteFile(filepath.Join(dir, "rank-"+strconv.Itoa(g.Rank())), b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// readRankResult reads what TestHelperDataParallelRank wrote for rank r.
func readRankResult(t *testing.T, dir string, r int) ([]float64, []float32) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "rank-"+strconv.Itoa(r)))
	if err != nil {
		t.Fatal(err)
	}
	rd := bytes.NewReader(b)
	var n int64
	if err := binary.Read(rd, binary.LittleEndian, &n); err != nil {
		t.Fatal(err)
	}
	losses := make([]float64, n)
	if err := binary.Read(rd, binary.LittleEndian, losses); err != nil {
		t.Fatal(err)
	}
	params := make([]float32, rd.Len()/4)
	if err := binary.Read(rd, binary.LittleEndian, params); err != nil {
		t.Fatal(err)
	}
	return losses, params
}

// A size-1 group (no backend configured) leaves the step exactly as it is
// without a group: the same numbers, one trace.
func TestSizeOneGroupLeavesStepUnchanged(t *testing.T) {
	for _, k := range []string{"MLX_RANK", "MLX_HOSTFILE"} {
		t.Setenv(k, "")
		os.Unsetenv(k)
	}
	var g *mlx.Group
	if err := mlx.Do(func() error {
		var err error
		g, err = mlx.InitDistributed(false, "ring")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if g.Size() != 1 {
		t.Fatalf("group without a configured backend has size %d, want 1", g.Size())
	}
	cfg := dataParallelConfig()
	ds := memoryDataset(t, fixture.SyntheticText(30_000), cfg.Model.Context)
	wantLosses, _, wantParams := groupRun(t, cfg, ds, nil)
	losses, traces, params := groupRun(t, cfg, ds, g)
	if traces != 1 {
		t.Fatalf("step with a size-1 group traced %d times, want 1", traces)
	}
	if fmt.Sprint(losses) != fmt.Sprint(wantLosses) {
		t.Fatalf("losses with a size-1 group %v, without a group %v; want identical", losses, wantLosses)
	}
	for i := range params {
		if params[i] != wantParams[i] {
			t.Fatalf("parameter %d with a size-1 group is %g, without a group %g; want identical", i, params[i], wantParams[i])
		}
	}
}
