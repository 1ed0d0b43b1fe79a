package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

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
}

// runFinetuneBench times the fine-tune step of each method (compiled and
// interpreted with --compare), rounds times over, and prints the results
// and their ratios.
func runFinetuneBench(out, status io.Writer, cfg train.Config, bo bench.Options, fb finetuneBench, compare, asJSON bool, rounds int) error {
	for _, m := range fb.methods {
		if !slices.Contains(train.FineTuneMethods(), m) {
			return usageError("invalid --finetune %s: want methods among %s", m, strings.Join(train.FineTuneMethods(), ", "))
		}
	}
	compiles := []bool{cfg.Compile}
	if compare {
		compiles = []bool{true, false}
	}
	ad := peft.Config{Rank: fb.rank, Alpha: fb.alpha, Targets: fb.targets}
	var results []bench.Result
	for round := 1; round <= rounds; round++ {
		for _, m := range fb.methods {
			for _, c := range compiles {
				cc := cfg
				cc.Compile = c
				r, err := bench.RunFineTune(cc, bench.FineTune{Method: m, Adapter: ad}, bo)
				if err != nil {
					return fmt.Errorf("fine-tune %s, compile=%t: %w", m, c, err)
				}
				r.Round = round
				fmt.Fprintf(status, "  round %d %-10s compile=%-5t %8.1f ms/step  trainable %s  traces %d\n",
					round, r.Preset, r.Compile, r.MsPerStepMedian, humanCount(r.Params), r.Traces)
				results = append(results, r)
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
	return printFinetuneRatios(out, results, compiles)
}

// printFinetuneRatios writes, per method, the median over rounds of
// ms/step and peak memory, interpreted/compiled, and each method's time
// and memory relative to a full fine-tune measured in the same run.
func printFinetuneRatios(w io.Writer, results []bench.Result, compiles []bool) error {
	type key struct {
		preset  string
		compile bool
	}
	ms, mem := map[key][]float64{}, map[key][]float64{}
	var presets []string
	params := map[string]int{}
	for _, r := range results {
		k := key{r.Preset, r.Compile}
		ms[k] = append(ms[k], r.MsPerStepMedian)
		mem[k] = append(mem[k], float64(r.PeakMemoryBytes))
		if !slices.Contains(presets, r.Preset) {
			presets = append(presets, r.Preset)
		}
		params[r.Preset] = r.Params
	}
	var full string
	for _, p := range presets {
		if strings.HasSuffix(p, "/"+train.MethodFull) {
			full = p
		}
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "fine-tune\tcompile\ttrainable\tms/step\tpeak mem\tinterpreted/compiled\tms vs full\tpeak mem vs full\t")
	for _, p := range presets {
		for _, c := range compiles {
			k := key{p, c}
			t, m := bench.Quantile(ms[k], 0.5), bench.Quantile(mem[k], 0.5)
			ratio, vsFull, memFull := "", "", ""
			if c && len(compiles) == 2 {
				ratio = fmt.Sprintf("%.2fx", bench.Quantile(ms[key{p, false}], 0.5)/t)
			}
			if full != "" {
				vsFull = fmt.Sprintf("%.2fx", t/bench.Quantile(ms[key{full, c}], 0.5))
				memFull = fmt.Sprintf("%.2fx", m/bench.Quantile(mem[key{full, c}], 0.5))
			}
			fmt.Fprintf(tw, "%s\t%t\t%s\t%.1f\t%s\t%s\t%s\t%s\t\n", p, c, humanCount(params[p]), t, humanBytes(uint64(m)), ratio, vsFull, memFull)
		}
	}
	return tw.Flush()
}
