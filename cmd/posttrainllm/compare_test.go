package main

import (
	"testing"

	"github.com/posttrainllm/posttrainllm/train/bench"
)

func TestCompareMatrix(t *testing.T) {
	if got := compareMatrix([]string{"cosine"}, []int{4}); len(got) != 2 || got[0] != (bench.Cell{Compile: true, Schedule: "cosine", Accum: 4}) ||
		got[1] != (bench.Cell{Compile: false, Schedule: "cosine", Accum: 4}) {
		t.Fatalf("matrix of cosine × accum 4 = %v, want compiled and interpreted cosine accum 4", got)
	}
	cells := compareMatrix(nil, nil)
	seen := map[bench.Cell]bool{}
	for _, c := range cells {
		seen[c] = true
	}
	if len(cells) != 8 || len(seen) != 8 {
		t.Fatalf("%d cells (%d distinct), want 2 compile × 2 schedules × 2 accum: %v", len(cells), len(seen), cells)
	}
}

func TestSpeedupsPairCompiledAndInterpreted(t *testing.T) {
	rs := []bench.Result{
		{Compile: true, Schedule: "cosine", Accum: 1, MsPerStepMedian: 10, HostMsPerStep: 1},
		{Compile: false, Schedule: "cosine", Accum: 1, MsPerStepMedian: 30, HostMsPerStep: 5},
		{Compile: true, Schedule: "constant", Accum: 4, MsPerStepMedian: 20, HostMsPerStep: 2},
	}
	rows, err := speedups(rs)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 || rows[0].speedup != 3 || rows[0].hostSpeedup != 5 || rows[0].schedule != "cosine" {
		t.Fatalf("rows %+v, want one cosine row with speedup 3 and host speedup 5", rows)
	}
	if _, err := speedups(rs[2:]); err == nil {
		t.Fatal("speedup without a pair accepted")
	}
}

// The median of the rounds' ratios is taken, not the ratio of medians:
// round 2's slow interpreted run (a noisy machine) moves the range, not the
// median.
func TestSpeedupsOverRounds(t *testing.T) {
	var rs []bench.Result
	for round, ms := range [][2]float64{{10, 20}, {10, 90}, {12, 30}} {
		rs = append(rs,
			bench.Result{Round: round + 1, Compile: true, Schedule: "cosine", Accum: 4, MsPerStepMedian: ms[0], HostMsPerStep: 1},
			bench.Result{Round: round + 1, Compile: false, Schedule: "cosine", Accum: 4, MsPerStepMedian: ms[1], HostMsPerStep: 3})
	}
	rows, err := speedups(rs)
	if err != nil {
		t.Fatal(err)
	}
	r := rows[0]
	if len(rows) != 1 || r.rounds != 3 || r.speedup != 2.5 || r.minSpeedup != 2 || r.maxSpeedup != 9 ||
		r.compiled != 10 || r.interpreted != 30 || r.hostSpeedup != 3 {
		t.Fatalf("row %+v: want 3 rounds, median ratio 2.5 in 2–9, medians 10 and 30 ms, host 3", r)
	}
}
