package train

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/posttrainllm/posttrainllm/data"
	"github.com/posttrainllm/posttrainllm/mlx"
	"github.com/posttrainllm/posttrainllm/model"
	"github.com/posttrainllm/posttrainllm/step"
)

// How a Plan was chosen (Plan.How).
const (
	// PlanForced is a micro-batch set in the config (Config.MicroBatch).
	PlanForced = "forced"
	// PlanStatic is automatic on the CPU: the batch as configured, Accum
	// steps of Batch sequences, with no probe.
	PlanStatic = "static"
	// PlanProbed is automatic on a GPU: the largest micro-batch whose step
	// a probe measured within the memory budget (ProbePlan).
	PlanProbed = "probed"
)

// DefaultMemoryFraction is the share of the device's memory that an
// automatically chosen plan's step may peak at when Config.MemoryBudget is
// unset: the rest is headroom for the evaluator, MLX's buffer cache and
// the allocator's fragmentation.
const DefaultMemoryFraction = 0.8

// Plan is how the Batch × Accum sequences of one update run: Steps
// microbatches of MicroBatch sequences each, accumulated in one compiled
// step. Batch × Accum is what a run asks for, the sequences (and so the
// tokens) per update; the plan is how they execute. Every plan gives the
// same update, to float rounding: MicroBatch divides Batch × Accum, so
// the microbatches are of equal size, and the mean of their mean losses is
// the mean loss over all tokens (their gradients likewise). Sequences keep
// their order: microbatch i holds sequences i·MicroBatch … (i+1)·MicroBatch-1
// of the update.
type Plan struct {
	MicroBatch int    `json:"micro_batch"` // sequences per forward pass
	Steps      int    `json:"accum_steps"` // microbatches per update
	How        string `json:"how"`         // PlanForced, PlanStatic or PlanProbed
	// BudgetBytes is the memory budget of the run (Config.MemoryBudget
	// resolved against the device's memory); only a probed plan is held
	// to it. 0 when the device's memory is unknown.
	BudgetBytes uint64 `json:"memory_budget_bytes,omitempty"`
	// PeakBytes is the peak memory the probe measured for the chosen
	// micro-batch's step; 0 unless probed.
	PeakBytes uint64 `json:"probe_peak_bytes,omitempty"`
	// Probes lists the candidates the probe tried, largest first.
	Probes []PlanProbe `json:"probes,omitempty"`
	// Cached says the probed plan came from the plan cache
	// (Config.PlanCache) without probing; ProbeSeconds is how long this
	// process spent probing, 0 then.
	Cached       bool    `json:"cached,omitempty"`
	ProbeSeconds float64 `json:"probe_seconds,omitempty"`
	// CacheError says why a probed plan could not be written to the plan
	// cache; the run goes on without it.
	CacheError string `json:"plan_cache_error,omitempty"`
}

// PlanProbe is one candidate micro-batch a probe tried.
type PlanProbe struct {
	MicroBatch int    `json:"micro_batch"`
	PeakBytes  uint64 `json:"peak_bytes,omitempty"` // measured; 0 when not run
	Fits       bool   `json:"fits"`
	// Skipped says why the candidate did not run, or how its update
	// failed; "" when it ran.
	Skipped string `json:"skipped,omitempty"`
}

// String describes the plan for a run's header.
func (p Plan) String() string {
	steps := "steps"
	if p.Steps == 1 {
		steps = "step"
	}
	s := fmt.Sprintf("micro-batch %d × %d accumulation %s", p.MicroBatch, p.Steps, steps)
	switch p.How {
	case PlanForced:
		return s + " (forced)"
	case PlanStatic:
		return s + " (static: the batch as configured, the CPU's automatic plan)"
	case PlanProbed:
		if p.Cached {
			return s + fmt.Sprintf(" (probed before, from the plan cache: its step peaked at %s of the %s budget)",
				gib(float64(p.PeakBytes)), gib(float64(p.BudgetBytes)))
		}
		s += fmt.Sprintf(" (probed in %.1f s: its step peaks at %s of the %s budget; %d candidate(s) tried)",
			p.ProbeSeconds, gib(float64(p.PeakBytes)), gib(float64(p.BudgetBytes)), len(p.Probes))
		if p.CacheError != "" {
			s += "; not kept: " + p.CacheError
		}
		return s
	}
	return s
}

// withPlan returns cfg as it runs under p: p.Steps microbatches of
// p.MicroBatch sequences.
func withPlan(cfg Config, p Plan) Config {
	cfg.Batch, cfg.Accum, cfg.MicroBatch = p.MicroBatch, p.Steps, p.MicroBatch
	return cfg
}

// NewBatch allocates a batch of the plan's shape, [Steps, MicroBatch,
// context]: a Sampler fills it with the same windows, in the same order,
// as a batch of the config's [Accum, Batch, context], and leaves the same
// state after it, so the data of a run do not depend on its plan.
func (p Plan) NewBatch(context int) (*data.Batch, error) {
	return data.NewBatch(p.Steps, p.MicroBatch, context)
}

// StepOptions are RunStepOptions(cfg) with the plan's accumulation steps.
func (p Plan) StepOptions(cfg Config) step.StepOptions {
	o := RunStepOptions(cfg)
	o.Accum = p.Steps
	return o
}

// ChoosePlan returns the plan cfg (as Prepare returns it) runs under:
// cfg.MicroBatch when set; otherwise, on the CPU, the batch as configured
// (a static plan: the CPU has no device memory of its own to fill, and
// the host's memory is what everything else needs too), and on a GPU the
// plan ProbePlan finds within cfg's memory budget, or the plan cache of
// cfg.PlanCache holds for the same step, device and build. It runs on the
// MLX thread and selects cfg's device.
func ChoosePlan(cfg Config, m *model.Transformer) (Plan, error) {
	return ChooseStepPlan(cfg, modelProbe(m))
}

// StepProbe measures the candidates of a probed plan for one kind of
// step (ChooseStepPlan): LowerBound is the memory a run of c needs at
// least, without running anything (a candidate over the budget is
// skipped), and Peak runs two updates of a throwaway state of c's step,
// as training runs them (ProbeUpdates), and returns the peak memory over
// them.
type StepProbe struct {
	LowerBound func(c Config) float64
	Peak       func(c Config) (uint64, error)
	// Step names the kind of step measured, for the plan cache's key:
	// "pretraining", or a fine-tune's settings.
	Step string
}

// modelProbe is the probe of the pretraining step of m (probeStep).
func modelProbe(m *model.Transformer) StepProbe {
	return StepProbe{
		LowerBound: func(c Config) float64 { need := c.MinMemory(); return need.Weights + need.Logits },
		Peak:       func(c Config) (uint64, error) { return probeStep(c, m) },
		Step:       "pretraining",
	}
}

// ChooseStepPlan is ChoosePlan for the step that probe measures: a
// fine-tune's, say, whose task builds its own step.
func ChooseStepPlan(cfg Config, probe StepProbe) (Plan, error) {
	var p Plan
	err := mlx.Do(func() error {
		if err := mlx.UseDevice(cfg.Device); err != nil {
			return err
		}
		budget, err := cfg.MemoryBudgetBytes()
		if err != nil {
			return err
		}
		seqs := cfg.Batch * cfg.Accum
		switch {
		case cfg.MicroBatch > 0:
			p = Plan{MicroBatch: cfg.MicroBatch, Steps: seqs / cfg.MicroBatch, How: PlanForced, BudgetBytes: budget}
		case cfg.Device != "gpu":
			p = Plan{MicroBatch: cfg.Batch, Steps: cfg.Accum, How: PlanStatic, BudgetBytes: budget}
		case budget == 0:
			return fmt.Errorf("memory_budget %q is a fraction of the device's memory, which MLX does not report here; give it in bytes (80GiB) or set micro_batch",
				cfg.MemoryBudget)
		default:
			var id planIdentity // the cache's key needs it
			if cfg.PlanCache != "" {
				id, err = currentPlanIdentity(cfg)
			}
			if err == nil {
				p, err = probePlanCached(cfg, budget, probe, id)
			}
		}
		return err
	})
	return p, err
}

// ProbePlan returns the plan of the largest micro-batch that divides
// cfg.Batch × cfg.Accum and whose step fits budget bytes. For each
// candidate, largest first, it builds the step, runs two updates of a
// throwaway state (fresh parameters and optimizer state, synthetic
// tokens in the windows' form the run uses (probeBatch), learning rate 0)
// on cfg's device as training runs them, the
// second scheduled while the first computes (State.UpdateAsync), and
// reads MLX's peak memory over them, the parameters and optimizer state
// included; the first candidate that peaks within the budget wins. Since
// accumulation runs microbatches one after another, the peak depends on
// the micro-batch, not on the number of steps.
//
// A candidate whose lower bound (Config.MinMemory: weights, gradients and
// logits) is already over the budget is skipped without running, so the
// probe does not allocate far beyond it. Each candidate run costs what the
// first two updates of a run cost: a trace, MLX's compilation and two
// updates of that micro-batch's step. A candidate whose update fails (a
// failed allocation that MLX reports as an error) counts as not fitting;
// on the CPU, where MLX 0.32 does not survive a failed allocation, keep
// the budget within the machine's memory. It runs on the MLX thread; call
// it with nothing else of the run allocated.
func ProbePlan(cfg Config, m *model.Transformer, budget uint64) (Plan, error) {
	return ProbeStepPlan(cfg, budget, modelProbe(m))
}

// ProbeStepPlan is ProbePlan for the step that probe measures (a
// fine-tune's, say; ChooseStepPlan).
func ProbeStepPlan(cfg Config, budget uint64, probe StepProbe) (Plan, error) {
	seqs := cfg.Batch * cfg.Accum
	p := Plan{How: PlanProbed, BudgetBytes: budget}
	err := mlx.Do(func() error {
		if err := mlx.UseDevice(cfg.Device); err != nil {
			return err
		}
		for _, mb := range divisorsDown(seqs) {
			c := withPlan(cfg, Plan{MicroBatch: mb, Steps: seqs / mb})
			candidate := PlanProbe{MicroBatch: mb}
			if mb > maxDim {
				candidate.Skipped = fmt.Sprintf("over MLX's %d-sequence dimension limit", maxDim)
			} else if need := probe.LowerBound(c); need > float64(budget) {
				candidate.Skipped = fmt.Sprintf("needs at least %s", gib(need))
			} else {
				peak, err := probe.Peak(c)
				if err != nil {
					candidate.Skipped = err.Error()
				} else {
					candidate.PeakBytes, candidate.Fits = peak, peak <= budget
				}
			}
			p.Probes = append(p.Probes, candidate)
			if candidate.Fits {
				p.MicroBatch, p.Steps, p.PeakBytes = mb, seqs/mb, candidate.PeakBytes
				return nil
			}
		}
		last := p.Probes[len(p.Probes)-1]
		return fmt.Errorf("no micro-batch fits the memory budget of %s: the smallest, 1 sequence, %s; raise memory_budget or shrink the model or context",
			gib(float64(budget)), describeProbe(last))
	})
	return p, err
}

// describeProbe says what became of a candidate that did not fit.
func describeProbe(p PlanProbe) string {
	if p.Skipped != "" {
		return "was not run: " + p.Skipped
	}
	return "peaked at " + gib(float64(p.PeakBytes))
}

// probeStep runs two updates of a throwaway state of cfg's step, one
// scheduled while the other runs as in training, and returns the peak
// memory over them.
func probeStep(cfg Config, m *model.Transformer) (uint64, error) {
	o, err := NewOptimizer(cfg, m.Specs)
	if err != nil {
		return 0, err
	}
	// Deferred calls run last first: the buffers go back to the system
	// once the state and the step have released them.
	defer mlx.ClearCache()
	compiled, err := step.NewModelStep(m, o, RunStepOptions(cfg))
	if err != nil {
		return 0, err
	}
	defer compiled.Free()
	st, err := step.InitState(compiled, m, cfg.Seed)
	if err != nil {
		return 0, err
	}
	defer st.Free()
	b, stream, err := probeBatch(cfg)
	if err != nil {
		return 0, err
	}
	defer stream.Free()
	return ProbeUpdates(st, b)
}

// ProbeUpdates returns the peak memory of two updates of st on b, with
// learning rate 0, scheduled as a training run schedules them
// (State.UpdateAsync): the second's buffers are allocated while the first
// still holds its own, and a run's peak is that overlap's. The state's
// arrays are computed first and counted in the peak.
func ProbeUpdates(st *step.State, b step.Batch) (uint64, error) {
	if err := st.Eval(); err != nil {
		return 0, err
	}
	mlx.ClearCache()
	mlx.ResetPeakMemory()
	for range 2 {
		if err := st.UpdateAsync(0, b); err != nil {
			return 0, err
		}
	}
	if err := st.Eval(); err != nil {
		return 0, err
	}
	return mlx.Memory().Peak, nil
}

// probeBatch returns the synthetic batch a probe of cfg's step updates on,
// its windows fed as a run of cfg feeds them (WindowSource): gathered on
// the device from a token stream, or copied from the host. The probe then
// traces the step the run will trace, and MLX compiles the kernels the
// run's updates will launch; with the other form the first updates of a
// run on a cold machine waited for a second set of kernels to compile
// (docs/performance/gpu.md, "Starting a run"). The stream, nil for host
// windows, is the caller's to free. The probe does not know the corpus,
// so it takes the device's form also for a corpus longer than
// MaxStreamTokens, which a run copies from the host.
func probeBatch(cfg Config) (step.Batch, *step.TokenStream, error) {
	n, t := cfg.Accum*cfg.Batch*cfg.Model.Context, cfg.Model.Context
	token := func(i int) int32 { return int32(i % cfg.Model.VocabSize) }
	if device, _ := WindowSource(cfg, 0); device {
		ids := make([]int32, n+1)
		for i := range ids {
			ids[i] = token(i)
		}
		stream, err := step.NewTokenStream(data.NewTokens(ids).All(), t)
		if err != nil {
			return step.Batch{}, nil, fmt.Errorf("plan probe: %w", err)
		}
		starts := make([]int32, cfg.Accum*cfg.Batch)
		for k := range starts {
			starts[k] = int32(k * t)
		}
		return step.Batch{Stream: stream, Starts: starts, N: cfg.Accum, B: cfg.Batch, T: t}, stream, nil
	}
	b := step.Batch{X: make([]int32, n), Y: make([]int32, n), N: cfg.Accum, B: cfg.Batch, T: t}
	for i := range b.X {
		b.X[i], b.Y[i] = token(i), token(i+1)
	}
	return b, nil, nil
}

// divisorsDown lists the divisors of n, largest first.
func divisorsDown(n int) []int {
	var small, large []int
	for d := 1; d*d <= n; d++ {
		if n%d == 0 {
			small = append(small, d)
			if d != n/d {
				large = append(large, n/d)
			}
		}
	}
	out := large
	for i := len(small) - 1; i >= 0; i-- {
		out = append(out, small[i])
	}
	return out
}

// MemoryBudget is a memory budget as Config.MemoryBudget writes it: a
// number of bytes, or a fraction of the device's memory.
type MemoryBudget struct {
	Bytes    uint64  // set when given in bytes
	Fraction float64 // set when given as a fraction, in (0, 1]
}

// byteUnits are the units ParseMemoryBudget accepts, in bytes.
var byteUnits = map[string]float64{
	"b": 1, "kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12,
	"kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40,
}

// ParseMemoryBudget reads a memory budget: a number with a byte unit
// ("8GiB", "512MiB", "80GB", "1e9B"; units B, KB, MB, GB, TB and KiB, MiB,
// GiB, TiB in any case) or a bare fraction of the device's memory in
// (0, 1] ("0.8"). "" is DefaultMemoryFraction.
func ParseMemoryBudget(s string) (MemoryBudget, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return MemoryBudget{Fraction: DefaultMemoryFraction}, nil
	}
	i := strings.IndexFunc(s, func(r rune) bool {
		return (r < '0' || r > '9') && r != '.' && r != 'e' && r != 'E' && r != '+' && r != '-'
	})
	num, unit := s, ""
	if i >= 0 {
		num, unit = strings.TrimSpace(s[:i]), strings.ToLower(strings.TrimSpace(s[i:]))
	}
	// "1e9B": the exponent's e is part of the number, a unit's b is not.
	v, err := strconv.ParseFloat(num, 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) || v <= 0 {
		return MemoryBudget{}, errBudget
	}
	if unit == "" {
		if v > 1 {
			return MemoryBudget{}, errBudget
		}
		return MemoryBudget{Fraction: v}, nil
	}
	scale, ok := byteUnits[unit]
	if !ok || v*scale < 1 || v*scale > math.MaxUint64/2 {
		return MemoryBudget{}, errBudget
	}
	return MemoryBudget{Bytes: uint64(v * scale)}, nil
}

// errBudget is what a memory budget that does not parse is refused with,
// phrased as Validate's "want …".
var errBudget = fmt.Errorf("want bytes with a unit (8GiB, 512MiB, 80GB) or a fraction of the device's memory in (0, 1] (0.8)")

// Of returns the budget in bytes for a device of total bytes; a fraction
// of an unknown size (0) is 0.
func (b MemoryBudget) Of(total uint64) uint64 {
	if b.Bytes > 0 {
		return b.Bytes
	}
	return uint64(b.Fraction * float64(total))
}

// MemoryBudgetBytes resolves c.MemoryBudget against the memory of c's
// device: the GPU's as MLX reports it, the host's RAM for the CPU. It is 0
// for a fraction when that size is unknown.
func (c Config) MemoryBudgetBytes() (uint64, error) {
	b, err := ParseMemoryBudget(c.MemoryBudget)
	if err != nil {
		return 0, fmt.Errorf("memory_budget = %s, %w", c.MemoryBudget, err)
	}
	if b.Bytes > 0 {
		return b.Bytes, nil
	}
	total := physicalMemory()
	if c.Device == "gpu" {
		if total, err = mlx.GPU.Memory(); err != nil {
			return 0, err
		}
	}
	return b.Of(total), nil
}
