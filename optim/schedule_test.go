package optim

import (
	"math"
	"strings"
	"testing"
)

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-12*math.Max(1, math.Abs(b)) }

func TestConstantSchedule(t *testing.T) {
	s, err := NewSchedule("constant", 3e-4, 0, 0, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, step := range []int{0, 1, 99, 1 << 30} {
		if got := s.LR(step); got != 3e-4 {
			t.Fatalf("constant LR(%d) = %g, want 3e-4", step, got)
		}
	}
	if s.Name() != "constant" {
		t.Fatalf("Name() = %q", s.Name())
	}
}

func TestWarmupCosineSchedule(t *testing.T) {
	const peak, minLR, warmup, total = 1e-3, 1e-4, 10, 110
	s, err := NewSchedule("cosine", peak, minLR, warmup, total, 0)
	if err != nil {
		t.Fatal(err)
	}
	if s.Name() != "cosine" {
		t.Fatalf("Name() = %q", s.Name())
	}
	// The cosine spans steps 10..109: 99 intervals.
	cases := map[int]float64{
		0:          peak / (warmup + 1),
		1:          2 * peak / (warmup + 1),
		warmup - 1: peak * warmup / (warmup + 1),
		warmup:     peak,
		warmup + 1: minLR + (peak-minLR)*0.5*(1+math.Cos(math.Pi/99)),
		59:         minLR + (peak-minLR)*0.5*(1+math.Cos(math.Pi*49/99)),
		total - 1:  minLR,
		total:      minLR,
		total + 50: minLR,
		-3:         peak / (warmup + 1),
	}
	for step, want := range cases {
		if got := s.LR(step); !near(got, want) {
			t.Fatalf("cosine LR(%d) = %.12g, want %.12g", step, got, want)
		}
	}
	for step := 1; step < warmup; step++ {
		if !(s.LR(step) > s.LR(step-1)) {
			t.Fatalf("warm-up not increasing at step %d: %g after %g", step, s.LR(step), s.LR(step-1))
		}
	}
	for step := warmup + 1; step < total; step++ {
		if !(s.LR(step) < s.LR(step-1)) {
			t.Fatalf("cosine not decreasing at step %d: %g after %g", step, s.LR(step), s.LR(step-1))
		}
	}
	// The boundary: the warm-up's last step is one warm-up increment below
	// the peak, the cosine's first step is exactly the peak, so the rate
	// changes at every step (no off-by-one that holds the peak twice) and the
	// jump into the peak is one ordinary warm-up increment.
	if s.LR(warmup) != peak || !(s.LR(warmup-1) < peak) {
		t.Fatalf("boundary: LR(%d) = %g, LR(%d) = %g, want %g below the peak then exactly %g",
			warmup-1, s.LR(warmup-1), warmup, s.LR(warmup), peak*warmup/(warmup+1), peak)
	}
	if jump, inc := s.LR(warmup)-s.LR(warmup-1), s.LR(1)-s.LR(0); !near(jump, inc) {
		t.Fatalf("boundary jump %g differs from the warm-up increment %g", jump, inc)
	}

	noWarmup, err := NewSchedule("cosine", peak, minLR, 0, 11, 0)
	if err != nil {
		t.Fatal(err)
	}
	if noWarmup.LR(0) != peak || !near(noWarmup.LR(5), (peak+minLR)/2) || noWarmup.LR(10) != minLR {
		t.Fatalf("cosine without warm-up: LR(0,5,10) = %g %g %g, want %g %g %g",
			noWarmup.LR(0), noWarmup.LR(5), noWarmup.LR(10), peak, (peak+minLR)/2, minLR)
	}
	oneStep := WarmupCosine{Peak: peak, Min: minLR, Warmup: 4, Total: 5}
	if !near(oneStep.LR(3), peak*4/5) || oneStep.LR(4) != peak || oneStep.LR(5) != minLR {
		t.Fatalf("cosine with Warmup = Total-1: LR(3,4,5) = %g %g %g, want %g %g %g",
			oneStep.LR(3), oneStep.LR(4), oneStep.LR(5), peak*4/5, peak, minLR)
	}
}

func TestWarmupStableDecaySchedule(t *testing.T) {
	const peak, minLR, warmup, total = 2e-3, 2e-4, 5, 100
	s, err := NewSchedule("wsd", peak, minLR, warmup, total, 0.2)
	if err != nil {
		t.Fatal(err)
	}
	if s.Name() != "wsd" {
		t.Fatalf("Name() = %q", s.Name())
	}
	// 20 decay steps: 80..99.
	cases := map[int]float64{
		0:          peak / (warmup + 1),
		warmup - 1: peak * warmup / (warmup + 1),
		warmup:     peak,
		warmup + 1: peak,
		79:         peak,
		80:         peak - (peak-minLR)/20,
		89:         peak - (peak-minLR)*10/20,
		total - 1:  minLR,
		total:      minLR,
		total + 7:  minLR,
	}
	for step, want := range cases {
		if got := s.LR(step); !near(got, want) {
			t.Fatalf("wsd LR(%d) = %.12g, want %.12g", step, got, want)
		}
	}
	for step := 1; step < total+5; step++ {
		prev, cur := s.LR(step-1), s.LR(step)
		switch {
		case step < warmup && !(cur > prev):
			t.Fatalf("warm-up not increasing at %d", step)
		case step >= warmup && step < 80 && cur != peak:
			t.Fatalf("stable phase LR(%d) = %g, want %g", step, cur, peak)
		case step >= 80 && step < total && !(cur < prev):
			t.Fatalf("decay not decreasing at %d", step)
		}
	}
	flat, err := NewSchedule("wsd", peak, minLR, 0, 10, 0)
	if err != nil {
		t.Fatal(err)
	}
	if flat.LR(0) != peak || flat.LR(9) != peak || flat.LR(10) != minLR {
		t.Fatalf("wsd without decay: LR(0,9,10) = %g %g %g", flat.LR(0), flat.LR(9), flat.LR(10))
	}
}

func TestNewScheduleRejectsBadInputs(t *testing.T) {
	inf := math.Inf(1)
	cases := []struct {
		name          string
		peak, minLR   float64
		warmup, total int
		fraction      float64
		want          string
	}{
		{"linear", 1e-3, 0, 0, 10, 0, `"linear"`},
		{"constant", 0, 0, 0, 10, 0, "peak lr = 0"},
		{"cosine", -1, 0, 0, 10, 0, "peak lr = -1"},
		{"cosine", inf, 0, 0, 10, 0, "peak lr = +Inf"},
		{"cosine", math.NaN(), 0, 0, 10, 0, "peak lr = NaN"},
		{"cosine", 1e-3, -1e-4, 0, 10, 0, "min lr = -0.0001"},
		{"cosine", 1e-3, 2e-3, 0, 10, 0, "min lr = 0.002"},
		{"cosine", 1e-3, 0, -1, 10, 0, "warmup = -1"},
		{"cosine", 1e-3, 0, 10, 10, 0, "total = 10 with warmup = 10"},
		{"wsd", 1e-3, 0, 20, 5, 0.1, "total = 5 with warmup = 20"},
		{"wsd", 1e-3, 0, 0, 10, 1.5, "decay fraction = 1.5"},
		{"wsd", 1e-3, 0, 0, 10, -0.1, "decay fraction = -0.1"},
		{"wsd", 1e-3, 0, 8, 10, 0.5, "decay fraction = 0.5 gives 5 decay steps"},
	}
	for _, c := range cases {
		_, err := NewSchedule(c.name, c.peak, c.minLR, c.warmup, c.total, c.fraction)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Fatalf("NewSchedule(%q, %v, %v, %d, %d, %v): error %v, want one containing %q",
				c.name, c.peak, c.minLR, c.warmup, c.total, c.fraction, err, c.want)
		}
	}
	if got := ScheduleNames(); len(got) != 3 || got[0] != "constant" || got[1] != "cosine" || got[2] != "wsd" {
		t.Fatalf("ScheduleNames() = %v", got)
	}
}
