package main

import (
	"errors"
	"slices"

	"github.com/posttrainllm/posttrainllm/train/bench"
)

// compareMatrix is the matrix `bench --compare` runs: compile on and off ×
// the schedules × the accums (constant and cosine × 1 and 4 when empty),
// compiled and interpreted side by side.
func compareMatrix(schedules []string, accums []int) []bench.Cell {
	if len(schedules) == 0 {
		schedules = []string{"constant", "cosine"}
	}
	if len(accums) == 0 {
		accums = []int{1, 4}
	}
	var cells []bench.Cell
	for _, accum := range accums {
		for _, sched := range schedules {
			for _, compile := range []bool{true, false} {
				cells = append(cells, bench.Cell{Compile: compile, Schedule: sched, Accum: accum})
			}
		}
	}
	return cells
}

// speedupRow compares the compiled and the interpreted step of one
// schedule and accum: speedup is interpreted ÷ compiled median ms/step
// (the median over rounds, minSpeedup and maxSpeedup its range),
// hostSpeedup the same for host time.
type speedupRow struct {
	schedule               string
	accum, batch, rounds   int
	compiled, interpreted  float64 // median ms/step (median over rounds)
	speedup, hostSpeedup   float64
	minSpeedup, maxSpeedup float64
}

// speedups pairs the compiled and interpreted results of each schedule,
// accum and round in results and compares their times, one row per
// schedule and accum in the order they first appear: with several rounds,
// the row's times are medians over rounds and its speedups the median
// (and range) of the per-round ratios.
func speedups(results []bench.Result) ([]speedupRow, error) {
	type key struct {
		sched string
		accum int
	}
	type pair struct{ comp, interp *bench.Result }
	pairs := map[key]map[int]*pair{}
	var order []key
	for i := range results {
		r := &results[i]
		k := key{r.Schedule, r.Accum}
		if pairs[k] == nil {
			pairs[k] = map[int]*pair{}
			order = append(order, k)
		}
		p := pairs[k][r.Round]
		if p == nil {
			p = &pair{}
			pairs[k][r.Round] = p
		}
		if r.Compile {
			p.comp = r
		} else {
			p.interp = r
		}
	}
	var rows []speedupRow
	for _, k := range order {
		var comp, interp, ratio, host []float64
		batch := 0
		for _, p := range pairs[k] {
			if p.comp == nil || p.interp == nil {
				continue
			}
			batch = p.comp.Batch
			comp = append(comp, p.comp.MsPerStepMedian)
			interp = append(interp, p.interp.MsPerStepMedian)
			ratio = append(ratio, p.interp.MsPerStepMedian/p.comp.MsPerStepMedian)
			host = append(host, p.interp.HostMsPerStep/p.comp.HostMsPerStep)
		}
		if len(ratio) == 0 {
			continue
		}
		rows = append(rows, speedupRow{schedule: k.sched, accum: k.accum, batch: batch, rounds: len(ratio),
			compiled: bench.Quantile(comp, 0.5), interpreted: bench.Quantile(interp, 0.5),
			speedup: bench.Quantile(ratio, 0.5), minSpeedup: slices.Min(ratio), maxSpeedup: slices.Max(ratio),
			hostSpeedup: bench.Quantile(host, 0.5)})
	}
	if len(rows) == 0 {
		return nil, errors.New("bench: no schedule/accum pair has both a compiled and an interpreted result")
	}
	return rows, nil
}
