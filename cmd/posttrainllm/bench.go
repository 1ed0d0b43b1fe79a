package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/posttrainllm/posttrainllm/presets"
	"github.com/posttrainllm/posttrainllm/train/bench"
)

// benchOptions are the bench command's own flags.
type benchOptions struct {
	preset     string
	steps      int
	warmup     int
	json       bool
	pipelined  bool
	compare    bool
	rounds     int
	tokenCache string
	nproc      int
	finetune   finetuneBench
	generate   generateBench
	cpuProfile string
}

func newBenchCmd() *cobra.Command {
	var opts benchOptions
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Time training steps of a preset",
		Long: `bench runs untimed warm-up steps (the first compiled call traces the step,
and MLX's CPU backend JIT-compiles its kernels on first use), then --steps
timed optimizer updates on fresh parameters, and reports the median, 10th
and 90th percentile ms per step, steps and tokens per second, how often the
step was traced, host time (building the batch and calling the lazy step)
and device time (evaluating its outputs), and peak memory. Each timed update
is waited for, so its time is the host's plus the device's; with
--pipelined (the default) --steps more updates then run as train runs them,
the next scheduled while the device computes the last and the loss read
every log_every updates: the pipelined ms column (JSON
ms_per_step_pipelined, with its peak_memory_bytes_pipelined) is what
training on the same data gets.

Data are random tokens unless --corpus names real text; some kernels'
times depend on the tokens (on a GPU, the embedding gradient's scatter-add
meets frequent tokens on real text), so compare with train over --corpus. Any preset field can
be overridden by a flag as in train (--steps is the number of timed steps
here; --warmup stays the learning-rate warm-up).

--micro-batch and --memory-budget plan the step as in train (see
posttrainllm help train); the table's micro-batch×steps column and the JSON
fields micro_batch, accum_steps, plan (static, forced or probed),
memory_budget_bytes and probe_peak_bytes report the plan, peak_memory_bytes
what the timed steps peaked at.

--compare runs compile on/off × constant/cosine schedule × accum 1/4 in one
process, keeping the tokens per update of the preset (accum 4 runs a quarter
of the batch, as four forward passes whatever --micro-batch), and prints
each cell and the interpreted/compiled ratios; --schedule or --accum pick
one schedule or accum instead of both. --rounds N runs the whole comparison
N times over, so a shared machine's drift hits compiled and interpreted
alike; the ratios are then medians of the rounds' ratios, with their range.
--json prints one JSON object, or with --compare a JSON array.

--nproc N measures N data-parallel ranks on this machine (one GPU each on
a GPU, a loopback ring on the CPU), each with the preset's batch: the
tokens per step and per second count every rank's, and the JSON field
ranks says N. Rank 0 prints. It does not combine with --compare.

--finetune lora,full times the fine-tune step instead (posttrainllm
finetune's weighted step on synthetic windows whose first half is masked):
adapters of --rank, --alpha and --targets on a frozen base, or every weight.
With --compare each method runs compiled and interpreted; the ratio table
gives interpreted/compiled and each method's time and peak memory relative
to full, measured in the same process. --objective dpo (ipo, orpo, simpo)
also times that preference objective's step of the same shape after each
supervised one (the windows taken as pairs, so the batch must be even; a
LoRA or DoRA DPO step includes the adapter-off reference forward pass) and
prints its time and peak memory relative to the supervised step's;
--rounds N repeats the pair N times.

--generate FROM times generation instead, from a run, Hugging Face folder
or GGUF file: the one-sequence decoder (what chat uses) on one stream, then
the batched engine (what serve, evaluation and online RL use) at each
--streams count of concurrent streams, each a prompt of --prompt-tokens
random tokens and --gen-tokens greedy tokens. It reports prompt and
generated tokens per second over all streams, the mean time to first token,
and the engine's traces; --rounds N repeats the rows N times, alternating.
A Hugging Face folder or GGUF file computes in float32 unless --dtype says
otherwise (--dtype bfloat16 to time a bfloat16 model as published).`,
		Example: `  posttrainllm bench --preset tiny
  posttrainllm bench --preset tiny --schedule cosine --accum 4 --steps 30 --json
  posttrainllm bench --preset small --compare
  posttrainllm bench --preset huge --device gpu --compare --schedule cosine --accum 4 --rounds 5
  posttrainllm bench --preset tiny --compile=false --corpus input.txt
  posttrainllm bench --preset mega --device gpu --nproc 2 --json
  posttrainllm bench --preset tiny --finetune lora,full --compare
  posttrainllm bench --preset small --finetune lora --objective dpo --rounds 3
  posttrainllm bench --generate ~/models/SmolLM2-135M-Instruct --streams 1,8,32 --rounds 2`,
		Args: cobra.NoArgs,
	}
	fs := cmd.Flags()
	fs.StringVar(&opts.preset, "preset", "tiny", "preset to measure (see posttrainllm presets)")
	fs.IntVar(&opts.steps, "steps", 20, "timed steps")
	fs.IntVar(&opts.warmup, "warmup-steps", 5, "untimed steps first (tracing, kernel JIT)")
	fs.BoolVar(&opts.json, "json", false, "print JSON instead of a table")
	fs.BoolVar(&opts.pipelined, "pipelined", true, "also time --steps updates scheduled as training schedules them (pipelined ms)")
	fs.BoolVar(&opts.compare, "compare", false, "run the compile × schedule × accum matrix")
	fs.IntVar(&opts.rounds, "rounds", 1, "with --compare: run the matrix this many times over, alternating")
	fs.StringVar(&opts.tokenCache, "token-cache", "", "directory of cached token files (with --corpus)")
	fs.IntVar(&opts.nproc, "nproc", 1, "data-parallel ranks to start on this machine")
	fs.StringSliceVar(&opts.finetune.methods, "finetune", nil, "time the fine-tune step of these methods (lora, dora, full) instead")
	fs.IntVar(&opts.finetune.rank, "rank", 8, "with --finetune: adapter rank")
	fs.Float64Var(&opts.finetune.alpha, "alpha", 16, "with --finetune: adapter alpha")
	fs.StringSliceVar(&opts.finetune.targets, "targets", []string{"attn"}, "with --finetune: projections to adapt")
	fs.StringVar(&opts.finetune.objective, "objective", "", "with --finetune: also time this preference objective's step (dpo, ipo, orpo, simpo) beside the supervised one")
	fs.Float64Var(&opts.finetune.beta, "beta", 0, "with --objective: its beta (0: the objective's default)")
	fs.StringVar(&opts.generate.src.from, "generate", "", "time generation from this run, Hugging Face folder or GGUF file instead: the one-sequence decoder and the batched engine")
	fs.IntSliceVar(&opts.generate.streams, "streams", []int{1, 8, 32}, "with --generate: counts of concurrent streams to time the engine at")
	fs.IntVar(&opts.generate.promptTokens, "prompt-tokens", 128, "with --generate: prompt tokens per stream (random tokens)")
	fs.IntVar(&opts.generate.genTokens, "gen-tokens", 128, "with --generate: tokens generated per stream (greedy, no stop tokens)")
	fs.IntVar(&opts.generate.maxBatch, "max-batch", 0, "with --generate: the engine's batch (0: the largest --streams)")
	fs.StringVar(&opts.cpuProfile, "cpuprofile", "", "write a Go CPU profile of the run to this new file (go tool pprof)")
	ov := addConfigFlags(fs, "steps", "log-every", "eval-every", "eval-tokens", "checkpoint-every", "keep-checkpoints", "prefetch-depth")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		return withCPUProfile(opts.cpuProfile, func() error { return runBench(cmd, opts, ov) })
	}
	return cmd
}

func runBench(cmd *cobra.Command, opts benchOptions, ov *overrides) error {
	if opts.generate.src.from != "" {
		if cmd.Flags().Changed("dtype") {
			opts.generate.src.dtype = ov.value("dtype")
		}
		if err := opts.generate.src.check("bench --generate"); err != nil {
			return err
		}
		opts.generate.rounds = opts.rounds
		return runGenerateBench(cmd.OutOrStdout(), opts.generate, ov.value("device"), opts.json)
	}
	if opts.steps < 1 {
		return usageError("invalid --steps %d: want >= 1 timed step", opts.steps)
	}
	if opts.warmup < 0 {
		return usageError("invalid --warmup-steps %d: want >= 0", opts.warmup)
	}
	if opts.rounds < 1 {
		return usageError("invalid --rounds %d: want >= 1", opts.rounds)
	}
	if opts.rounds > 1 && !opts.compare && opts.finetune.objective == "" {
		return usageError("--rounds %d without --compare: rounds repeat a comparison; add --compare", opts.rounds)
	}
	if err := checkNproc(opts.nproc); err != nil {
		return err
	}
	if len(opts.finetune.methods) > 0 && (opts.nproc > 1 || rankEnv()) {
		return usageError("--finetune with --nproc %d: fine-tuning runs in one process; drop --nproc", opts.nproc)
	}
	if opts.compare && (opts.nproc > 1 || rankEnv()) {
		return usageError("--compare with --nproc %d: a comparison runs in one process; drop one", opts.nproc)
	}
	if opts.compare && ov.isChanged("compile") {
		return usageError("--compile %s with --compare: the comparison runs compiled and interpreted; drop --compile", ov.value("compile"))
	}
	if err := resolveCorpus(ov); err != nil {
		return err
	}
	base, err := presets.Load(opts.preset)
	if err != nil {
		return usageError("invalid --preset %s: want one of %s", opts.preset, strings.Join(presets.Names(), ", "))
	}
	// The bench runs warm-up + timed steps: validate the config as such a run.
	base.Steps = opts.warmup + opts.steps
	base.Warmup = min(base.Warmup, base.Steps/2)
	cfg, err := ov.apply(base)
	if err != nil {
		return &exitError{code: exitUsage, err: err}
	}
	if cfg.Device, err = pickDevice(ov.value("device"), cfg.Device, opts.preset); err != nil {
		return err
	}
	if err := cfg.CheckMemory(); err != nil {
		return &exitError{code: exitUsage, err: err}
	}
	if opts.nproc > 1 {
		return launchRanks(cmd.OutOrStdout(), cmd.ErrOrStderr(), opts.nproc, cfg.Device)
	}
	group, err := joinGroup()
	if err != nil {
		return err
	}
	out := rankOutput(group, cmd.OutOrStdout())
	status := out
	if opts.json {
		status = rankOutput(group, cmd.ErrOrStderr())
	}
	bo := bench.Options{Label: opts.preset, Warmup: opts.warmup, Steps: opts.steps, Group: group, Pipelined: opts.pipelined}
	if cfg.Corpus != "" {
		ds, err := openDataset(status, cfg, opts.tokenCache, "")
		if err != nil {
			return err
		}
		defer ds.Close()
		bo.Data = ds
	}
	fmt.Fprintln(status, describe(opts.preset, cfg))
	if len(opts.finetune.methods) > 0 {
		if cfg.Corpus != "" {
			return usageError("--corpus with --finetune: the fine-tune bench runs on synthetic masked windows; drop --corpus")
		}
		return runFinetuneBench(out, status, cfg, bo, opts.finetune, opts.compare, opts.json, opts.rounds)
	}
	if !opts.compare {
		res, err := bench.Run(cfg, bo)
		if err != nil {
			return err
		}
		if opts.json {
			return writeJSON(out, res)
		}
		return printBench(out, []bench.Result{res})
	}
	// --schedule and --accum pick the matrix's schedule and accum; the
	// tokens per update stay the preset's batch × accum.
	var schedules []string
	var accums []int
	if ov.isChanged("schedule") {
		schedules = []string{cfg.Schedule}
	}
	if ov.isChanged("accum") {
		accums = []int{cfg.Accum}
		cfg.Accum = base.Accum
	}
	results, err := bench.Compare(cfg, bo, compareMatrix(schedules, accums), opts.rounds, func(r bench.Result) {
		fmt.Fprintf(status, "  round %d compile=%-5t schedule=%-8s accum=%d batch=%-3d %8.1f ms/step  traces %d  ops/step %d\n",
			r.Round, r.Compile, r.Schedule, r.Accum, r.Batch, r.MsPerStepMedian, r.Traces, r.GraphOps)
	})
	if err != nil {
		return err
	}
	if opts.json {
		return writeJSON(out, results)
	}
	if err := printBench(out, results); err != nil {
		return err
	}
	fmt.Fprintln(out)
	return printSpeedup(out, results)
}

func writeJSON(w io.Writer, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}

// printBench writes results as a table.
func printBench(w io.Writer, results []bench.Result) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "preset\tdevice\tcompile\tschedule\taccum\tbatch\tmicro-batch×steps\twindows\tcontext\ttokens/step\tms/step p50\tp10\tp90\thost ms\tdevice ms\tpipelined ms\tsteps/s\ttokens/s\ttraces\tops/step\tpeak mem\tloss first->last\t")
	for _, r := range results {
		fmt.Fprintf(tw, "%s\t%s\t%t\t%s\t%d\t%d\t%d×%d\t%s\t%d\t%d\t%.1f\t%.1f\t%.1f\t%.2f\t%.1f\t%.1f\t%.2f\t%.0f\t%d\t%d\t%s\t%.3f->%.3f\t\n",
			r.Preset, r.Device, r.Compile, r.Schedule, r.Accum, r.Batch, r.MicroBatch, r.AccumSteps, r.Windows, r.Context, r.TokensPerStep,
			r.MsPerStepMedian, r.MsPerStepP10, r.MsPerStepP90, r.HostMsPerStep, r.DeviceMsPerStep, r.PipelinedMsPerStep,
			r.StepsPerS, r.TokensPerS, r.Traces, r.GraphOps, humanBytes(r.PeakMemoryBytes), r.LossFirst, r.LossLast)
	}
	return tw.Flush()
}

// printSpeedup writes the interpreted/compiled ratios of a comparison.
func printSpeedup(w io.Writer, results []bench.Result) error {
	rows, err := speedups(results)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "schedule\taccum\tbatch\trounds\tcompiled ms/step\tinterpreted ms/step\tinterpreted/compiled\trange\thost time interpreted/compiled\t")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%.1f\t%.1f\t%.2fx\t%.2f–%.2fx\t%.1fx\t\n",
			r.schedule, r.accum, r.batch, r.rounds, r.compiled, r.interpreted, r.speedup, r.minSpeedup, r.maxSpeedup, r.hostSpeedup)
	}
	return tw.Flush()
}
