package train

import (
	"errors"
	"math"
	"testing"
)

func benchConfig() Config {
	cfg := tinyConfig()
	cfg.Schedule, cfg.Accum, cfg.Warmup = "cosine", 2, 5
	return cfg
}

func TestBenchCompiledTracesOnce(t *testing.T) {
	cfg := benchConfig()
	res, err := Bench(cfg, BenchOptions{Label: "unit", Warmup: 2, Steps: 12})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Compile || res.Traces != 1 {
		t.Fatalf("compiled bench traced %d times (compile %t), want 1", res.Traces, res.Compile)
	}
	if res.Preset != "unit" || res.Accum != 2 || res.Batch != cfg.Batch || res.Context != cfg.Model.Context ||
		res.Steps != 12 || res.WarmupSteps != 2 || res.Data != "synthetic" || res.Schedule != "cosine" {
		t.Fatalf("result does not describe the run: %+v", res)
	}
	if res.TokensPerStep != 2*cfg.Batch*cfg.Model.Context || res.Params != cfg.WithDefaults().Model.NumParams() {
		t.Fatalf("tokens/step %d, params %d", res.TokensPerStep, res.Params)
	}
	if !(res.MsPerStepP10 > 0 && res.MsPerStepP10 <= res.MsPerStepMedian && res.MsPerStepMedian <= res.MsPerStepP90) {
		t.Fatalf("percentiles out of order: p10 %g p50 %g p90 %g", res.MsPerStepP10, res.MsPerStepMedian, res.MsPerStepP90)
	}
	if !(res.HostMsPerStep > 0 && res.DeviceMsPerStep > 0) {
		t.Fatalf("host %g ms, device %g ms: both must be measured", res.HostMsPerStep, res.DeviceMsPerStep)
	}
	if d := res.TokensPerS - res.StepsPerS*float64(res.TokensPerStep); math.Abs(d) > 1e-6*res.TokensPerS {
		t.Fatalf("tokens/s %g is not steps/s %g × tokens/step %d", res.TokensPerS, res.StepsPerS, res.TokensPerStep)
	}
	if res.PeakMemoryBytes == 0 || res.PeakMemoryBytes < res.ActiveMemoryBytes {
		t.Fatalf("peak memory %d, active %d", res.PeakMemoryBytes, res.ActiveMemoryBytes)
	}
	// The synthetic stream is learnable: 14 AdamW steps lower the loss.
	if !(res.LossLast < res.LossFirst) || math.Abs(res.LossFirst-math.Log(256)) > 0.3 {
		t.Fatalf("loss %g -> %g, want a start near ln 256 and a fall", res.LossFirst, res.LossLast)
	}
}

func TestBenchInterpretedRunsBodyEveryStep(t *testing.T) {
	cfg := benchConfig()
	cfg.Compile = false
	res, err := Bench(cfg, BenchOptions{Warmup: 1, Steps: 3})
	if err != nil {
		t.Fatal(err)
	}
	if res.Compile || res.Traces != 4 {
		t.Fatalf("interpreted bench ran the step body %d times, want 4 (1 warm-up + 3 timed)", res.Traces)
	}
	// Compiling fuses the elementwise ops (optimizer, GELU, accumulation):
	// the compiled step evaluates fewer operations.
	cfg.Compile = true
	compiled, err := Bench(cfg, BenchOptions{Warmup: 1, Steps: 1})
	if err != nil {
		t.Fatal(err)
	}
	if !(compiled.GraphOps > 0 && compiled.GraphOps < res.GraphOps) {
		t.Fatalf("operations per step: compiled %d, interpreted %d; want 0 < compiled < interpreted", compiled.GraphOps, res.GraphOps)
	}
	t.Logf("operations per step: compiled %d, interpreted %d", compiled.GraphOps, res.GraphOps)
}

// Every step frees what it replaces: the memory held after the last step
// does not depend on how many steps ran. MLX's own bookkeeping varies by a
// few bytes between runs; one scalar leaked per step would add 4 B × 38.
func TestBenchMemoryIsFlat(t *testing.T) {
	cfg := benchConfig()
	short, err := Bench(cfg, BenchOptions{Warmup: 1, Steps: 2})
	if err != nil {
		t.Fatal(err)
	}
	long, err := Bench(cfg, BenchOptions{Warmup: 1, Steps: 40})
	if err != nil {
		t.Fatal(err)
	}
	const slack = 64
	if long.ActiveMemoryBytes > short.ActiveMemoryBytes+slack {
		t.Fatalf("active memory after 41 steps %d B, after 3 steps %d B: steps leak arrays",
			long.ActiveMemoryBytes, short.ActiveMemoryBytes)
	}
}

func TestBenchRejectsBadOptions(t *testing.T) {
	if _, err := Bench(benchConfig(), BenchOptions{Steps: 0}); err == nil {
		t.Fatal("0 timed steps accepted")
	}
	if _, err := Bench(benchConfig(), BenchOptions{Warmup: -1, Steps: 1}); err == nil {
		t.Fatal("negative warm-up accepted")
	}
	cfg := benchConfig()
	cfg.Optimizer = "adam"
	if _, err := Bench(cfg, BenchOptions{Steps: 1}); err == nil {
		t.Fatal("unknown optimizer accepted")
	}
}

func TestBenchStopsOnNonFiniteLoss(t *testing.T) {
	cfg := benchConfig()
	cfg.Optimizer, cfg.Schedule, cfg.LR, cfg.MinLR, cfg.Warmup, cfg.GradClip = "sgd", "constant", 1e30, 0, 0, 0
	_, err := Bench(cfg, BenchOptions{Steps: 10})
	if !errors.Is(err, ErrNonFinite) {
		t.Fatalf("want ErrNonFinite, got %v", err)
	}
}

func TestCompareMatrixKeepsTokensPerStep(t *testing.T) {
	cfg := benchConfig()
	cfg.Batch, cfg.Accum = 8, 1
	if got := CompareMatrix([]string{"cosine"}, []int{4}); len(got) != 2 || got[0] != (CompareCell{true, "cosine", 4}) ||
		got[1] != (CompareCell{false, "cosine", 4}) {
		t.Fatalf("matrix of cosine × accum 4 = %v, want compiled and interpreted cosine accum 4", got)
	}
	cells := CompareMatrix(nil, nil)
	if len(cells) != 8 {
		t.Fatalf("%d cells, want 2 compile × 2 schedules × 2 accum", len(cells))
	}
	seen := map[CompareCell]bool{}
	for _, cell := range cells {
		seen[cell] = true
		c, err := cell.Apply(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if c.TokensPerStep() != cfg.TokensPerStep() || c.Accum != cell.Accum || c.Compile != cell.Compile || c.Schedule != cell.Schedule {
			t.Fatalf("cell %+v gives batch %d accum %d (%d tokens/step), want %d tokens/step", cell, c.Batch, c.Accum, c.TokensPerStep(), cfg.TokensPerStep())
		}
	}
	if len(seen) != 8 {
		t.Fatalf("matrix repeats cells: %v", cells)
	}
	cfg.Batch = 6
	if _, err := (CompareCell{Accum: 4}).Apply(cfg); err == nil {
		t.Fatal("6 sequences split into 4 microbatches")
	}
}

func TestSpeedupPairsCompiledAndInterpreted(t *testing.T) {
	rs := []BenchResult{
		{Compile: true, Schedule: "cosine", Accum: 1, MsPerStepMedian: 10, HostMsPerStep: 1},
		{Compile: false, Schedule: "cosine", Accum: 1, MsPerStepMedian: 30, HostMsPerStep: 5},
		{Compile: true, Schedule: "constant", Accum: 4, MsPerStepMedian: 20, HostMsPerStep: 2},
	}
	rows, err := Speedup(rs)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 || rows[0].Speedup != 3 || rows[0].HostSpeedup != 5 || rows[0].Schedule != "cosine" {
		t.Fatalf("rows %+v, want one cosine row with speedup 3 and host speedup 5", rows)
	}
	if _, err := Speedup(rs[2:]); err == nil {
		t.Fatal("speedup without a pair accepted")
	}
}

// TestSpeedupOverRounds takes the median of the rounds' ratios, not the
// ratio of medians: round 2's slow interpreted run (a noisy machine) moves
// the range, not the median.
func TestSpeedupOverRounds(t *testing.T) {
	var rs []BenchResult
	for round, ms := range [][2]float64{{10, 20}, {10, 90}, {12, 30}} {
		rs = append(rs,
			BenchResult{Round: round + 1, Compile: true, Schedule: "cosine", Accum: 4, MsPerStepMedian: ms[0], HostMsPerStep: 1},
			BenchResult{Round: round + 1, Compile: false, Schedule: "cosine", Accum: 4, MsPerStepMedian: ms[1], HostMsPerStep: 3})
	}
	rows, err := Speedup(rs)
	if err != nil {
		t.Fatal(err)
	}
	r := rows[0]
	if len(rows) != 1 || r.Rounds != 3 || r.Speedup != 2.5 || r.MinSpeedup != 2 || r.MaxSpeedup != 9 ||
		r.Compiled != 10 || r.Interpreted != 30 || r.HostSpeedup != 3 {
		t.Fatalf("row %+v: want 3 rounds, median ratio 2.5 in 2–9, medians 10 and 30 ms, host 3", r)
	}
}

func TestBenchCompareRounds(t *testing.T) {
	cfg := benchConfig()
	rs, err := BenchCompare(cfg, BenchOptions{Warmup: 1, Steps: 1}, CompareOptions{Schedules: []string{"cosine"}, Accums: []int{2}, Rounds: 2}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 4 {
		t.Fatalf("%d results, want 2 rounds × compiled and interpreted", len(rs))
	}
	for i, r := range rs {
		if r.Round != i/2+1 || r.Compile != (i%2 == 0) || r.Schedule != "cosine" || r.Accum != 2 {
			t.Fatalf("result %d: round %d compile %t schedule %s accum %d", i, r.Round, r.Compile, r.Schedule, r.Accum)
		}
	}
	if _, err := BenchCompare(cfg, BenchOptions{Warmup: 1, Steps: 1}, CompareOptions{Rounds: -1}, nil); err == nil {
		t.Fatal("rounds -1 accepted")
	}
}

func TestQuantile(t *testing.T) {
	xs := []float64{5, 1, 4, 2, 3}
	for _, c := range []struct{ q, want float64 }{{0, 1}, {0.5, 3}, {1, 5}, {0.1, 1.4}, {0.9, 4.6}} {
		if got := quantile(xs, c.q); math.Abs(got-c.want) > 1e-12 {
			t.Fatalf("quantile(%v) = %g, want %g", c.q, got, c.want)
		}
	}
	if xs[0] != 5 {
		t.Fatal("quantile sorted its input")
	}
	if !math.IsNaN(quantile(nil, 0.5)) {
		t.Fatal("quantile of nothing is not NaN")
	}
}

func TestSyntheticStreamIsSeededAndInRange(t *testing.T) {
	a, b := syntheticStream(300, 5000, 7), syntheticStream(300, 5000, 7)
	c := syntheticStream(300, 5000, 8)
	same := true
	for i := range a {
		if a[i] != b[i] {
			t.Fatal("same seed, different streams")
		}
		if a[i] < 0 || a[i] >= 300 {
			t.Fatalf("token %d out of range", a[i])
		}
		same = same && a[i] == c[i]
	}
	if same {
		t.Fatal("different seeds, same stream")
	}
	// Each token has at most syntheticSuccessors distinct successors.
	succ := map[int32]map[int32]bool{}
	for i := 1; i < len(a); i++ {
		if succ[a[i-1]] == nil {
			succ[a[i-1]] = map[int32]bool{}
		}
		succ[a[i-1]][a[i]] = true
	}
	for tok, s := range succ {
		if len(s) > syntheticSuccessors {
			t.Fatalf("token %d has %d successors, want at most %d", tok, len(s), syntheticSuccessors)
		}
	}
}
