// Command loopbench sets the training loop beside the benchmark's
// pipelined loop in one process, so that the loop's own cost per update
// shows without the minute each new process spends compiling kernels.
//
//	go run ./scripts/loopbench -preset huge -corpus FILE [-steps 300] [-rounds 2] [-micro-batch 16]
//
// Each round runs, on fresh parameters and the same corpus:
//
//   - bench: `posttrainllm bench --corpus FILE`'s pipelined updates
//     (bench.Run with Pipelined), ms per update;
//   - train: pretrain.Trainer.Run as `posttrainllm train` runs it (the
//     preset's logging, evaluation and checkpoint settings), the median ms
//     per update over the log intervals after the first 40 updates and
//     before the last 20, those ending in an evaluation left out;
//   - train variants, each changing one setting: no held-out evaluation,
//     a metrics line every 50 updates, a prefetch depth of 8.
//
// One line per row goes to stdout: round, row, ms per update, and for the
// train rows the interval range.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"slices"
	"time"

	"github.com/posttrainllm/posttrainllm/data"
	"github.com/posttrainllm/posttrainllm/presets"
	"github.com/posttrainllm/posttrainllm/pretrain"
	"github.com/posttrainllm/posttrainllm/train"
	"github.com/posttrainllm/posttrainllm/train/bench"
)

func main() {
	preset := flag.String("preset", "huge", "preset to run")
	corpus := flag.String("corpus", "", "text corpus (required)")
	device := flag.String("device", "", "device (default: the preset's)")
	steps := flag.Int("steps", 300, "updates per train row; the bench row times as many")
	rounds := flag.Int("rounds", 2, "rounds of all rows")
	micro := flag.Int("micro-batch", 16, "sequences per forward pass (0: probe the plan)")
	flag.Parse()
	if *corpus == "" || *steps < 80 {
		log.Fatal("loopbench: -corpus is required and -steps must be at least 80")
	}
	cfg, err := presets.Load(*preset)
	if err != nil {
		log.Fatal(err)
	}
	if *device != "" {
		cfg.Device = *device
	}
	cfg.MicroBatch, cfg.Steps, cfg.Corpus = *micro, *steps, *corpus
	if err := run(cfg, *preset, *rounds); err != nil {
		log.Fatal("loopbench: ", err)
	}
}

// run prints rounds rounds of the bench row and the train rows of cfg.
func run(cfg train.Config, preset string, rounds int) error {
	tok, err := data.NewTokenizer(cfg.Tokenizer)
	if err != nil {
		return err
	}
	ds, err := pretrain.OpenDatasetWith(cfg.Corpus, tok, "", cfg.Model.Context, cfg.ValFraction)
	if err != nil {
		return err
	}
	defer ds.Close()
	tmp, err := os.MkdirTemp("", "loopbench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)

	variants := []struct {
		name string
		edit func(*train.Config)
	}{
		{"train", func(*train.Config) {}},
		{"train, no evaluation", func(c *train.Config) { c.EvalEvery = 0 }},
		{"train, log every 50", func(c *train.Config) { c.LogEvery = 50 }},
		{"train, prefetch depth 8", func(c *train.Config) { c.PrefetchDepth = 8 }},
	}
	for r := 1; r <= rounds; r++ {
		res, err := bench.Run(cfg, bench.Options{Label: preset, Warmup: 20, Steps: cfg.Steps, Data: ds, Pipelined: true})
		if err != nil {
			return err
		}
		fmt.Printf("round %d  %-26s waited %.2f ms, pipelined %.2f ms per update (plan %d × %d)\n",
			r, "bench", res.MsPerStepMedian, res.PipelinedMsPerStep, res.MicroBatch, res.AccumSteps)
		for _, v := range variants {
			c := cfg
			v.edit(&c)
			med, lo, hi, err := trainRow(c, ds, tmp)
			if err != nil {
				return err
			}
			fmt.Printf("round %d  %-26s %.2f ms per update (intervals %.2f–%.2f)\n", r, v.name, med, lo, hi)
		}
	}
	return nil
}

// trainRow runs cfg's training and returns the median, least and most ms
// per update over the log intervals between update 40 and cfg.Steps-20,
// leaving out those that end in a held-out evaluation.
func trainRow(cfg train.Config, ds *pretrain.Dataset, tmp string) (med, lo, hi float64, err error) {
	dir, err := os.MkdirTemp(tmp, "run-")
	if err != nil {
		return 0, 0, 0, err
	}
	defer os.RemoveAll(dir)
	tr, err := pretrain.New(cfg, ds, dir)
	if err != nil {
		return 0, 0, 0, err
	}
	var ms []float64
	last, lastStep := time.Time{}, 0
	tr.Hooks.OnLog = func(m train.Metrics) {
		now := time.Now()
		evaluated := cfg.EvalEvery > 0 && m.Step%cfg.EvalEvery == 0 // the interval holds an evaluation
		if lastStep >= 40 && m.Step <= cfg.Steps-20 && m.Step > lastStep && !evaluated {
			ms = append(ms, float64(now.Sub(last).Microseconds())/1e3/float64(m.Step-lastStep))
		}
		last, lastStep = now, m.Step
	}
	if _, err := tr.Run(context.Background(), ""); err != nil {
		return 0, 0, 0, err
	}
	if len(ms) == 0 {
		return 0, 0, 0, fmt.Errorf("no log interval between update 40 and %d", cfg.Steps-20)
	}
	slices.Sort(ms)
	return ms[len(ms)/2], ms[0], ms[len(ms)-1], nil
}
