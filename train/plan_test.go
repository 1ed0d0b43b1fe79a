package train

import (
	"math"
	"strings"
	"testing"

	"github.com/posttrainllm/posttrainllm/internal/runtest/fixture"
)

func TestParseMemoryBudget(t *testing.T) {
	for _, c := range []struct {
		in   string
		want MemoryBudget
	}{
		{"", MemoryBudget{Fraction: DefaultMemoryFraction}},
		{"0.8", MemoryBudget{Fraction: 0.8}},
		{"1", MemoryBudget{Fraction: 1}},
		{"8GiB", MemoryBudget{Bytes: 8 << 30}},
		{"8 gib", MemoryBudget{Bytes: 8 << 30}},
		{"512MiB", MemoryBudget{Bytes: 512 << 20}},
		{"1.5GiB", MemoryBudget{Bytes: 3 << 29}},
		{"80GB", MemoryBudget{Bytes: 80e9}},
		{"1e9B", MemoryBudget{Bytes: 1e9}},
		{"2048b", MemoryBudget{Bytes: 2048}},
	} {
		got, err := ParseMemoryBudget(c.in)
		if err != nil || got != c.want {
			t.Errorf("ParseMemoryBudget(%q) = %+v, %v; want %+v", c.in, got, err, c.want)
		}
	}
	for _, bad := range []string{"0", "-1", "1.5", "8", "8XB", "GiB", "8 GiB extra", "NaN", "-2GiB", "0GiB", "0.1B", "1e30TiB", "auto"} {
		if got, err := ParseMemoryBudget(bad); err == nil {
			t.Errorf("ParseMemoryBudget(%q) = %+v, want an error", bad, got)
		}
	}
	if got := (MemoryBudget{Fraction: 0.5}).Of(1000); got != 500 {
		t.Errorf("half of 1000 bytes is %d", got)
	}
	if got := (MemoryBudget{Bytes: 7}).Of(1000); got != 7 {
		t.Errorf("7 bytes of 1000 is %d", got)
	}
}

// A micro-batch must divide batch × accum; the error lists what does.
func TestValidateMicroBatch(t *testing.T) {
	cfg := tinyConfig().WithDefaults()
	cfg.Batch, cfg.Accum = 4, 3
	for mb, want := range map[int]string{
		5:  "micro_batch = 5, want a divisor of batch × accum = 4 × 3 = 12 (1, 2, 3, 4, 6, 12)",
		-1: "micro_batch = -1, want 0 (auto) or a number of sequences >= 1",
		24: "micro_batch = 24, want a divisor",
	} {
		c := cfg
		c.MicroBatch = mb
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("micro_batch %d: %v, want %q", mb, err, want)
		}
	}
	for _, mb := range []int{0, 1, 6, 12} {
		c := cfg
		c.MicroBatch = mb
		if err := c.Validate(); err != nil {
			t.Errorf("micro_batch %d: %v", mb, err)
		}
	}
	wide := cfg
	wide.Batch, wide.Accum, wide.MicroBatch = 8, 8, 3
	if err := wide.Validate(); err == nil || !strings.Contains(err.Error(), "= 8 × 8 = 64 (1, 2, 4, 8, 16, 32, …, 64)") {
		t.Errorf("micro_batch 3 of 64: %v", err)
	}
	cfg.MemoryBudget = "lots"
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "memory_budget = lots, want bytes with a unit") {
		t.Errorf("memory_budget lots: %v", err)
	}
}

// On the CPU an automatic plan is the batch as configured; a set
// micro-batch is taken as given.
func TestChoosePlanOnCPU(t *testing.T) {
	cfg, m, err := Prepare(tinyConfig())
	if err != nil {
		t.Fatal(err)
	}
	cfg.Batch, cfg.Accum = 2, 4
	p, err := ChoosePlan(cfg, m)
	if err != nil || p.MicroBatch != 2 || p.Steps != 4 || p.How != PlanStatic || len(p.Probes) != 0 {
		t.Fatalf("auto on the CPU: %+v, %v; want the static plan 2 × 4", p, err)
	}
	if p.BudgetBytes == 0 {
		t.Errorf("the static plan reports no budget; want %g of the machine's memory", DefaultMemoryFraction)
	}
	cfg.MicroBatch = 8
	if p, err = ChoosePlan(cfg, m); err != nil || p.MicroBatch != 8 || p.Steps != 1 || p.How != PlanForced {
		t.Fatalf("micro_batch 8: %+v, %v; want the forced plan 8 × 1", p, err)
	}
}

// Folding accumulation into bigger forward passes, or splitting a batch
// into accumulated ones, gives the same training: batch 2 × accum 4 run
// as micro-batch 8, and batch 8 × accum 1 run as micro-batch 2 × 4 steps,
// reach the same parameters after a few AdamW updates.
func TestPlansGiveTheSameUpdates(t *testing.T) {
	base := tinyConfig()
	base.Steps, base.Warmup = 4, 1
	ds := memoryDataset(t, fixture.SyntheticText(60_000), base.Model.Context)
	for _, c := range []struct {
		batch, accum, micro int
		wantSteps           int
	}{{2, 4, 8, 1}, {8, 1, 2, 4}} {
		cfg := base
		cfg.Batch, cfg.Accum = c.batch, c.accum
		wantLosses, _, want := setupRun(t, cfg, ds)
		cfg.MicroBatch = c.micro
		gotLosses, traces, got := setupRun(t, cfg, ds)
		if traces != 1 {
			t.Fatalf("micro-batch %d traced %d times, want 1", c.micro, traces)
		}
		var maxDiff, maxAbs float64
		for i := range want {
			maxDiff = math.Max(maxDiff, math.Abs(float64(got[i]-want[i])))
			maxAbs = math.Max(maxAbs, math.Abs(float64(want[i])))
		}
		if maxDiff > 1e-5*maxAbs {
			t.Errorf("batch %d × accum %d: run as micro-batch %d the parameters differ by up to %g (largest %g)",
				c.batch, c.accum, c.micro, maxDiff, maxAbs)
		}
		for i := range wantLosses {
			if d := math.Abs(gotLosses[i] - wantLosses[i]); d > 1e-5*wantLosses[i] {
				t.Errorf("batch %d × accum %d, update %d: loss %.7f as planned, %.7f as micro-batch %d",
					c.batch, c.accum, i+1, wantLosses[i], gotLosses[i], c.micro)
			}
		}
	}
}

// The probe picks the largest micro-batch whose step fits the budget,
// measuring each candidate it runs: all 8 sequences in one pass when
// memory is plentiful, fewer when the budget is below that step's
// peak (three quarters of it: one step's peak on the CPU moves by up to
// a tenth from run to run with the timing of its buffers' release), and
// an error naming the budget when even one sequence's lower
// bound exceeds it, without running anything.
func TestProbePlan(t *testing.T) {
	cfg := tinyConfig()
	cfg.Batch, cfg.Accum = 2, 4
	cfg, m, err := Prepare(cfg)
	if err != nil {
		t.Fatal(err)
	}
	roomy, err := ProbePlan(cfg, m, 1<<40)
	if err != nil {
		t.Fatal(err)
	}
	if roomy.MicroBatch != 8 || roomy.Steps != 1 || roomy.How != PlanProbed || len(roomy.Probes) != 1 ||
		!roomy.Probes[0].Fits || roomy.PeakBytes == 0 || roomy.PeakBytes != roomy.Probes[0].PeakBytes {
		t.Fatalf("with 1 TiB: %+v; want micro-batch 8 × 1 from one measured probe", roomy)
	}
	tight, err := ProbePlan(cfg, m, roomy.PeakBytes/4*3)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("roomy %+v\ntight %+v", roomy, tight)
	if tight.MicroBatch >= 8 || tight.Steps*tight.MicroBatch != 8 || tight.PeakBytes > tight.BudgetBytes {
		t.Fatalf("with 75%% of the 8-sequence step's peak: %+v; want a smaller micro-batch within the budget", tight)
	}
	if first := tight.Probes[0]; first.MicroBatch != 8 || first.Fits || first.PeakBytes <= tight.BudgetBytes {
		t.Fatalf("first candidate %+v under a budget of %d bytes; want 8 sequences, measured over it", first, tight.BudgetBytes)
	}
	_, err = ProbePlan(cfg, m, 1<<10)
	if err == nil || !strings.Contains(err.Error(), "no micro-batch fits the memory budget of 1.0 KiB") ||
		!strings.Contains(err.Error(), "was not run: needs at least") {
		t.Fatalf("with 1 KiB: %v; want an error naming the budget and the skipped candidates", err)
	}
}

// A probe feeds its step the windows in the form the run will (device
// windows from a token stream, or host tokens), so that it traces the
// run's step; both forms carry the same windows, and the stream's
// batch passes the step's own check.
func TestProbeBatchTakesTheRunsWindowForm(t *testing.T) {
	cfg := tinyConfig()
	cfg.Batch, cfg.Accum = 2, 3
	cfg, _, err := Prepare(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Windows = "host"
	host, stream, err := probeBatch(cfg)
	if err != nil || stream != nil || host.Stream != nil || len(host.X) != 2*3*cfg.Model.Context {
		t.Fatalf("host windows: batch %d tokens, stream %v, err %v; want tokens and no stream", len(host.X), stream, err)
	}
	cfg.Windows = "device"
	dev, stream, err := probeBatch(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Free()
	if dev.Stream != stream || dev.X != nil {
		t.Fatalf("device windows: %+v; want window starts into the returned stream", dev)
	}
	if err := dev.Check(cfg.Accum); err != nil {
		t.Fatalf("device windows: %v", err)
	}
	ids, err := stream.Tokens().Int32s()
	if err != nil {
		t.Fatal(err)
	}
	T := cfg.Model.Context
	for k, s := range dev.Starts {
		for j := range T {
			if x, y := ids[int(s)+j], ids[int(s)+j+1]; x != host.X[k*T+j] || y != host.Y[k*T+j] {
				t.Fatalf("window %d position %d: stream gives %d -> %d, host batch %d -> %d", k, j, x, y, host.X[k*T+j], host.Y[k*T+j])
			}
		}
	}
}
