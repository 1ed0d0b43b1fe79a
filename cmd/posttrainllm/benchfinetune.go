package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/posttrainllm/posttrainllm/finetune"
	"github.com/posttrainllm/posttrainllm/peft"
	"github.com/posttrainllm/posttrainllm/train"
	"github.com/posttrainllm/posttrainllm/train/bench"
)

// finetuneBench are bench's fine-tune flags.
type finetuneBench struct {
	methods []string
	rank    int
	alpha   float64
	targets []string
	// objective, when set, is a preference objective timed beside the
	// supervised step of each method, with its β (0: its default).
	objective string
	beta      float64
}

// runFinetuneBench times the fine-tune step of each method (compiled and
// interpreted with --compare), rounds times over, and prints the results
// and their ratios.
func runFinetuneBench(out, status io.Writer, cfg train.Config, bo bench.Options, fb finetuneBench, compare, asJSON bool, rounds int) error {
	for _, m := range fb.methods {
		if !slices.Contains(finetune.Methods(), m) {
			return usageError("invalid --finetune %s: want methods among %s", m, strings.Join(finetune.Methods(), ", "))
		}
	}
	compiles := []bool{cfg.Compile}
	if compare {
		compiles = []bool{true, false}
	}
	objectives := []finetune.Preference{{}}
	if fb.objective != "" {
		p := finetune.Preference{Objective: finetune.ObjectiveName(fb.objective), Beta: fb.beta}.WithDefaults()
		if err := p.Validate(); err != nil {
			return usageError("invalid --objective %s --beta %g: %v", fb.objective, fb.beta, err)
		}
		objectives = append(objectives, p)
	} else if fb.beta != 0 {
		return usageError("--beta %g without --objective: it shapes a preference objective", fb.beta)
	}
	ad := peft.Config{Rank: fb.rank, Alpha: fb.alpha, Targets: fb.targets}
	var results []bench.Result
	for round := 1; round <= rounds; round++ {
		for _, m := range fb.methods {
			for _, c := range compiles {
				for _, obj := range objectives {
					cc := cfg
					cc.Compile = c
					r, err := bench.RunFineTune(cc, bench.FineTune{Method: m, Adapter: ad, Objective: obj}, bo)
					if err != nil {
						return fmt.Errorf("fine-tune %s %s, compile=%t: %w", m, obj.Objective, c, err)
					}
					r.Round = round
					fmt.Fprintf(status, "  round %d %-14s compile=%-5t %8.1f ms/step  trainable %s  traces %d\n",
						round, r.Preset, r.Compile, r.MsPerStepMedian, humanCount(r.Params), r.Traces)
					results = append(results, r)
				}
			}
		}
	}
	if asJSON {
		return writeJSON(out, results)
	}
	if err := printBench(out, results); err != nil {
		return err
	}
	fmt.Fprintln(out)
	if err := printFinetuneRatios(out, results, compiles); err != nil {
		return err
	}
	if fb.objective == "" {
		return nil
	}
	fmt.Fprintln(out)
	return printObjectiveRatios(out, results, "/"+fb.objective)
}

// printObjectiveRatios writes, for each preference preset (its label
// ending in suffix, "/dpo") and compile mode, the medians over rounds (and
// ranges) of its time and peak memory relative to the supervised step of
// the same method, shape, round and compile mode.
func printObjectiveRatios(w io.Writer, results []bench.Result, suffix string) error {
	type key struct {
		round   int
		preset  string
		compile bool
	}
	byKey := map[key]bench.Result{}
	for _, r := range results {
		byKey[key{r.Round, r.Preset, r.Compile}] = r
	}
	type cell struct {
		preset  string
		compile bool
	}
	var cells []cell
	ratios := map[cell][2][]float64{}
	for _, r := range results {
		if !strings.HasSuffix(r.Preset, suffix) {
			continue
		}
		sft, ok := byKey[key{r.Round, strings.TrimSuffix(r.Preset, suffix), r.Compile}]
		if !ok {
			continue
		}
		c := cell{r.Preset, r.Compile}
		if _, seen := ratios[c]; !seen {
			cells = append(cells, c)
		}
		v := ratios[c]
		v[0] = append(v[0], r.MsPerStepMedian/sft.MsPerStepMedian)
		v[1] = append(v[1], float64(r.PeakMemoryBytes)/float64(sft.PeakMemoryBytes))
		ratios[c] = v
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "objective step\tcompile\trounds\tms vs sft\tpeak mem vs sft\t")
	// the median of v, with its range when there are several.
	median := func(v []float64) string {
		s := fmt.Sprintf("%.2fx", bench.Quantile(v, 0.5))
		if len(v) > 1 {
			s += fmt.Sprintf(" (%.2fx–%.2fx)", slices.Min(v), slices.Max(v))
		}
		return s
	}
	for _, c := range cells {
		v := ratios[c]
		fmt.Fprintf(tw, "%s\t%t\t%d\t%s\t%s\t\n", c.preset, c.compile, len(v[0]), median(v[0]), median(v[1]))
	}
	return tw.Flush()
}

// printFinetuneRatios writes, per method and compile mode, the median
// over rounds of ms/step and peak memory, and the medians of the per-round
// ratios (so a shared machine's drift between rounds cancels):
// interpreted/compiled, and time and peak memory relative to the full
// fine-tune of the same round.
func printFinetuneRatios(w io.Writer, results []bench.Result, compiles []bool) error {
	type key struct {
		round   int
		preset  string
		compile bool
	}
	byKey := map[key]bench.Result{}
	var presets []string
	var rounds []int
	for _, r := range results {
		byKey[key{r.Round, r.Preset, r.Compile}] = r
		if !slices.Contains(presets, r.Preset) {
			presets = append(presets, r.Preset)
		}
		if !slices.Contains(rounds, r.Round) {
			rounds = append(rounds, r.Round)
		}
	}
	full := ""
	for _, p := range presets {
		if strings.HasSuffix(p, "/"+finetune.MethodFull) {
			full = p
		}
	}
	// median of f over the rounds, with its range when there are several.
	median := func(f func(round int) float64, format string) string {
		var v []float64
		for _, r := range rounds {
			v = append(v, f(r))
		}
		s := fmt.Sprintf(format, bench.Quantile(v, 0.5))
		if len(v) > 1 {
			s += fmt.Sprintf(" (%s–%s)", fmt.Sprintf(format, slices.Min(v)), fmt.Sprintf(format, slices.Max(v)))
		}
		return s
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "fine-tune\tcompile\trounds\ttrainable\tms/step\tpeak mem\tinterpreted/compiled\tms vs full\tpeak mem vs full\t")
	for _, p := range presets {
		for _, c := range compiles {
			get := func(r int) bench.Result { return byKey[key{r, p, c}] }
			ms := median(func(r int) float64 { return get(r).MsPerStepMedian }, "%.1f")
			mem := humanBytes(uint64(bench.Quantile(func() []float64 {
				var v []float64
				for _, r := range rounds {
					v = append(v, float64(get(r).PeakMemoryBytes))
				}
				return v
			}(), 0.5)))
			ratio, vsFull, memFull := "", "", ""
			if c && len(compiles) == 2 {
				ratio = median(func(r int) float64 {
					return byKey[key{r, p, false}].MsPerStepMedian / get(r).MsPerStepMedian
				}, "%.2fx")
			}
			if full != "" {
				vsFull = median(func(r int) float64 {
					return get(r).MsPerStepMedian / byKey[key{r, full, c}].MsPerStepMedian
				}, "%.2fx")
				memFull = median(func(r int) float64 {
					return float64(get(r).PeakMemoryBytes) / float64(byKey[key{r, full, c}].PeakMemoryBytes)
				}, "%.2fx")
			}
			fmt.Fprintf(tw, "%s\t%t\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t\n", p, c, len(rounds), humanCount(get(rounds[0]).Params), ms, mem, ratio, vsFull, memFull)
		}
	}
	return tw.Flush()
}
