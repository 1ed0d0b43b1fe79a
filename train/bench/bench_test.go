package bench

import (
	"errors"
	"math"
	"testing"

	"github.com/posttrainllm/posttrainllm/data"
	"github.com/posttrainllm/posttrainllm/mlx"
	"github.com/posttrainllm/posttrainllm/model"
	"github.com/posttrainllm/posttrainllm/step"
	"github.com/posttrainllm/posttrainllm/train"
)

// benchConfig is a cosine, accum-2 run of a model small enough for unit
// tests on two CPU cores.
func benchConfig() train.Config {
	return train.Config{Model: model.Config{VocabSize: 256, DModel: 32, Layers: 2, Heads: 2, Context: 32},
		Tokenizer: "byte", Batch: 4, Accum: 2, Optimizer: "adamw", GradClip: 1, Compile: true, Seed: 1,
		Schedule: "cosine", LR: 3e-3, MinLR: 3e-4, Warmup: 5, Device: "cpu"}
}

func TestRunCompiledTracesOnce(t *testing.T) {
	cfg := benchConfig()
	res, err := Run(cfg, Options{Label: "unit", Warmup: 2, Steps: 12, Pipelined: true})
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
	if !(res.CPUMsPerStep > 0) {
		t.Fatalf("CPU time %g ms per step: a step that computes must use some", res.CPUMsPerStep)
	}
	if d := res.TokensPerS - res.StepsPerS*float64(res.TokensPerStep); math.Abs(d) > 1e-6*res.TokensPerS {
		t.Fatalf("tokens/s %g is not steps/s %g × tokens/step %d", res.TokensPerS, res.StepsPerS, res.TokensPerStep)
	}
	if res.PeakMemoryBytes == 0 || res.PeakMemoryBytes < res.ActiveMemoryBytes {
		t.Fatalf("peak memory %d, active %d", res.PeakMemoryBytes, res.ActiveMemoryBytes)
	}
	if !(res.PipelinedMsPerStep > 0) || res.PipelinedPeakMemoryBytes < res.ActiveMemoryBytes {
		t.Fatalf("pipelined: %g ms per step, peak %d bytes (active after the timed steps %d)",
			res.PipelinedMsPerStep, res.PipelinedPeakMemoryBytes, res.ActiveMemoryBytes)
	}
	// The synthetic stream is learnable: 14 AdamW steps lower the loss.
	if !(res.LossLast < res.LossFirst) || math.Abs(res.LossFirst-math.Log(256)) > 0.3 {
		t.Fatalf("loss %g -> %g, want a start near ln 256 and a fall", res.LossFirst, res.LossLast)
	}
}

func TestRunInterpretedRunsBodyEveryStep(t *testing.T) {
	cfg := benchConfig()
	cfg.Compile = false
	res, err := Run(cfg, Options{Warmup: 1, Steps: 3})
	if err != nil {
		t.Fatal(err)
	}
	if res.PipelinedMsPerStep != 0 || res.PipelinedPeakMemoryBytes != 0 {
		t.Fatalf("a bench without Pipelined reports pipelined updates: %g ms, peak %d", res.PipelinedMsPerStep, res.PipelinedPeakMemoryBytes)
	}
	if res.Compile || res.Traces != 4 {
		t.Fatalf("interpreted bench ran the step body %d times, want 4 (1 warm-up + 3 timed)", res.Traces)
	}
	// Compiling fuses the elementwise ops (optimizer, GELU, accumulation):
	// the compiled step evaluates fewer operations.
	cfg.Compile = true
	compiled, err := Run(cfg, Options{Warmup: 1, Steps: 1})
	if err != nil {
		t.Fatal(err)
	}
	if !(compiled.GraphOps > 0 && compiled.GraphOps < res.GraphOps) {
		t.Fatalf("operations per step: compiled %d, interpreted %d; want 0 < compiled < interpreted", compiled.GraphOps, res.GraphOps)
	}
	t.Logf("operations per step: compiled %d, interpreted %d", compiled.GraphOps, res.GraphOps)
	// The count by primitive holds the same operations, views added: the
	// interpreted step's matmuls are all there.
	for _, r := range []Result{res, compiled} {
		if n := mlx.CountKernelOps(r.GraphOpsByPrimitive); n != r.GraphOps || r.GraphOpsByPrimitive["Matmul"] == 0 {
			t.Fatalf("compile=%t: by primitive %v holds %d non-view operations and %d matmuls, want %d and > 0",
				r.Compile, r.GraphOpsByPrimitive, n, r.GraphOpsByPrimitive["Matmul"], r.GraphOps)
		}
	}
	// With more than one update it counts the second, which does not make
	// the initial state (fresh parameters, zero moments, their packing into
	// the flat layout); a one-update run can only count the first.
	only, err := Run(cfg, Options{Warmup: 0, Steps: 1})
	if err != nil {
		t.Fatal(err)
	}
	if !(only.GraphOps > compiled.GraphOps) {
		t.Fatalf("operations counted: %d in a one-update run, %d in a two-update run; want the first to add the initial state's",
			only.GraphOps, compiled.GraphOps)
	}
}

// Every step frees what it replaces: the memory held after the last step
// does not depend on how many steps ran. MLX's own bookkeeping varies by a
// few bytes between runs; one scalar leaked per step would add 4 B × 38.
func TestRunMemoryIsFlat(t *testing.T) {
	cfg := benchConfig()
	short, err := Run(cfg, Options{Warmup: 1, Steps: 2})
	if err != nil {
		t.Fatal(err)
	}
	long, err := Run(cfg, Options{Warmup: 1, Steps: 40})
	if err != nil {
		t.Fatal(err)
	}
	const slack = 64
	if long.ActiveMemoryBytes > short.ActiveMemoryBytes+slack {
		t.Fatalf("active memory after 41 steps %d B, after 3 steps %d B: steps leak arrays",
			long.ActiveMemoryBytes, short.ActiveMemoryBytes)
	}
}

func TestRunRejectsBadOptions(t *testing.T) {
	if _, err := Run(benchConfig(), Options{Steps: 0}); err == nil {
		t.Fatal("0 timed steps accepted")
	}
	if _, err := Run(benchConfig(), Options{Warmup: -1, Steps: 1}); err == nil {
		t.Fatal("negative warm-up accepted")
	}
	cfg := benchConfig()
	cfg.Optimizer = "adam"
	if _, err := Run(cfg, Options{Steps: 1}); err == nil {
		t.Fatal("unknown optimizer accepted")
	}
}

func TestRunStopsOnNonFiniteLoss(t *testing.T) {
	cfg := benchConfig()
	cfg.Optimizer, cfg.Schedule, cfg.LR, cfg.MinLR, cfg.Warmup, cfg.GradClip = "sgd", "constant", 1e30, 0, 0, 0
	_, err := Run(cfg, Options{Steps: 10})
	if !errors.Is(err, train.ErrNonFinite) {
		t.Fatalf("want train.ErrNonFinite, got %v", err)
	}
}

// A cell keeps the tokens per update: accum 4 runs a quarter of the batch.
func TestCellApplyKeepsTokensPerStep(t *testing.T) {
	cfg := benchConfig()
	cfg.Batch, cfg.Accum = 8, 1
	for _, cell := range []Cell{{true, "cosine", 1}, {false, "constant", 4}, {true, "wsd", 2}} {
		c, err := cell.Apply(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if c.TokensPerStep() != cfg.TokensPerStep() || c.Accum != cell.Accum || c.Compile != cell.Compile || c.Schedule != cell.Schedule {
			t.Fatalf("cell %+v gives batch %d accum %d (%d tokens/step), want %d tokens/step", cell, c.Batch, c.Accum, c.TokensPerStep(), cfg.TokensPerStep())
		}
	}
	cfg.Batch = 6
	if _, err := (Cell{Accum: 4}).Apply(cfg); err == nil {
		t.Fatal("6 sequences split into 4 microbatches")
	}
	if _, err := (Cell{Accum: 0}).Apply(cfg); err == nil {
		t.Fatal("accum 0 accepted")
	}
}

func TestCompareRounds(t *testing.T) {
	cfg := benchConfig()
	cells := []Cell{{true, "cosine", 2}, {false, "cosine", 2}}
	var seen []Result
	rs, err := Compare(cfg, Options{Warmup: 1, Steps: 1}, cells, 2, func(r Result) { seen = append(seen, r) })
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
	if len(seen) != len(rs) {
		t.Fatalf("each saw %d results, Compare returned %d", len(seen), len(rs))
	}
	if _, err := Compare(cfg, Options{Warmup: 1, Steps: 1}, cells, 0, nil); err == nil {
		t.Fatal("rounds 0 accepted")
	}
	if _, err := Compare(cfg, Options{Warmup: 1, Steps: 1}, []Cell{{true, "cosine", 3}}, 1, nil); err == nil {
		t.Fatal("a cell whose accum does not divide the sequences per update was run")
	}
}

func TestQuantile(t *testing.T) {
	xs := []float64{5, 1, 4, 2, 3}
	for _, c := range []struct{ q, want float64 }{{0, 1}, {0.5, 3}, {1, 5}, {0.1, 1.4}, {0.9, 4.6}} {
		if got := Quantile(xs, c.q); math.Abs(got-c.want) > 1e-12 {
			t.Fatalf("Quantile(%v) = %g, want %g", c.q, got, c.want)
		}
	}
	if xs[0] != 5 {
		t.Fatal("quantile sorted its input")
	}
	if !math.IsNaN(Quantile(nil, 0.5)) {
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

// A bench of windows gathered on the device runs the same updates as one
// of windows copied on the host, and says which it ran.
func TestRunWindowsOnDeviceAsOnHost(t *testing.T) {
	results := map[string]Result{}
	for _, w := range []string{"", "device"} {
		cfg := benchConfig()
		cfg.Windows = w
		res, err := Run(cfg, Options{Label: "unit", Warmup: 1, Steps: 4, Pipelined: true})
		if err != nil {
			t.Fatal(err)
		}
		results[w] = res
	}
	host, device := results[""], results["device"]
	if host.Windows != "host" || device.Windows != "device" {
		t.Fatalf("windows reported %q by default on the CPU and %q asked for the device; want host and device", host.Windows, device.Windows)
	}
	if host.LossFirst != device.LossFirst || host.LossLast != device.LossLast || device.Traces != 1 {
		t.Fatalf("losses %g → %g with host windows, %g → %g (%d traces) with device windows; want the same, 1 trace",
			host.LossFirst, host.LossLast, device.LossFirst, device.LossLast, device.Traces)
	}
}

// The pipelined loop waits for the device as pretrain.Trainer does
// (train's TestTrainerWaitsForTheDeviceOncePerUpdate): once per update
// for the previous update's gradient norm, and a fixed number of times
// per loss read, so that reading every 8 updates instead of every 4 adds
// one wait per added update and nothing else.
func TestPipelinedWaitsForTheDeviceAsTheTrainerDoes(t *testing.T) {
	const updates = 16
	w4, w8 := pipelinedWaits(t, updates, 4), pipelinedWaits(t, updates, 8)
	// 16 updates: 4 loss reads every 4, 2 every 8. Between reads the host
	// waits every − 1 times for the updates (not in the update after a
	// read) and p times for the read: in all updates + reads·(p − 1) + 1,
	// the last for the final optimizer state.
	if w4 <= w8 || (w4-w8)%2 != 0 || w4 != updates+4*((w4-w8)/2)+1 {
		t.Fatalf("%d updates: %d host waits reading the loss every 4, %d every 8; want one per update, a fixed number per read and one at the end",
			updates, w4, w8)
	}
}

// pipelinedWaits runs pipelined over updates updates of a fresh setup of
// benchConfig, reading the loss every every updates, and returns how
// often the host waited for the device.
func pipelinedWaits(t *testing.T, updates, every int) uint64 {
	t.Helper()
	cfg := benchConfig()
	cfg.Steps = 1 + updates
	cfg, m, err := train.Prepare(cfg)
	if err != nil {
		t.Fatal(err)
	}
	s, err := train.NewSetup(cfg, m, "")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Free()
	view, _, err := benchData(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	in, err := newInputs(cfg, s.Plan, view)
	if err != nil {
		t.Fatal(err)
	}
	defer in.stream.Free()
	sampler, err := data.NewSampler(view, cfg.Model.Context, cfg.Seed)
	if err != nil {
		t.Fatal(err)
	}
	next := func(int) (step.Batch, error) {
		if err := sampler.FillBatch(in.batch); err != nil {
			return step.Batch{}, err
		}
		return in.of(), nil
	}
	b, err := next(0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.State.Update(s.Schedule.LR(0), b); err != nil { // the timed steps before, their loss read
		t.Fatal(err)
	}
	before := mlx.HostWaits()
	var res Result
	if err := pipelined(s.State, Options{Steps: updates}, every, func(i int) float64 { return s.Schedule.LR(1 + i) }, next, &res); err != nil {
		t.Fatal(err)
	}
	return mlx.HostWaits() - before
}
