package main

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/posttrainllm/posttrainllm/presets"
	"github.com/posttrainllm/posttrainllm/train"
)

func newPresetsCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "presets",
		Short: "List the built-in presets with their sizes",
		Long: `presets prints every built-in preset, smallest first, with its model shape,
parameter count and tokens per optimizer update (batch × accum × context).
Start a run from one with --preset NAME and override any field with a flag.`,
		Example: `  posttrainllm presets
  posttrainllm train --preset small --lr 1e-3 --steps 500`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return printPresets(cmd.OutOrStdout())
		},
	}
}

func printPresets(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "preset\tlayers\td_model\theads\tcontext\ttokenizer\tvocab\tparams\tbatch\taccum\ttokens/step\tdtype\toptimizer\tschedule\tlr\tsteps\tdevice\t")
	for _, name := range presets.Names() {
		c, err := presets.Load(name)
		if err != nil {
			return err
		}
		m := c.Model
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%s\t%d\t%s\t%d\t%d\t%d\t%s\t%s\t%s\t%g\t%d\t%s\t\n",
			name, m.Layers, m.DModel, m.Heads, m.Context, c.Tokenizer, m.VocabSize, humanCount(m.NumParams()),
			c.Batch, c.Accum, c.TokensPerStep(), dtypeLabel(c), c.Optimizer, c.Schedule, c.LR, c.Steps, c.Device)
	}
	return tw.Flush()
}

// humanCount writes n as 131.4K, 22.3M or 1.2B.
func humanCount(n int) string {
	switch {
	case n >= 1e9:
		return fmt.Sprintf("%.2fB", float64(n)/1e9)
	case n >= 1e6:
		return fmt.Sprintf("%.1fM", float64(n)/1e6)
	case n >= 1e3:
		return fmt.Sprintf("%.1fK", float64(n)/1e3)
	}
	return fmt.Sprint(n)
}

// dtypeLabel is the compute dtype, with "+fp32" when parameters are float32
// masters.
func dtypeLabel(c train.Config) string {
	short := map[string]string{"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}
	d := short[c.Model.Dtype]
	if d == "" {
		d = c.Model.Dtype
	}
	if c.Model.MasterFP32 && d != "fp32" {
		d += "+fp32"
	}
	return d
}

// describe summarises a run in two lines: the model, then the training.
func describe(label string, c train.Config) string {
	m := c.Model
	step := "compiled step"
	if !c.Compile {
		step = "interpreted step"
	}
	return fmt.Sprintf("%s: %d layers, d_model %d, %d heads, context %d, %s params, %s, %s tokenizer\n"+
		"%*s  %d steps of batch %d × accum %d = %d tokens, %s, %s lr %g, %s, %s",
		label, m.Layers, m.DModel, m.Heads, m.Context, humanCount(m.NumParams()), dtypeLabel(c), c.Tokenizer,
		len(label), "", c.Steps, c.Batch, c.Accum, c.TokensPerStep(), c.Optimizer, c.Schedule, c.LR, c.Device, step)
}
