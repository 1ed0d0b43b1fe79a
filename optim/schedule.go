package optim

import (
	"fmt"
	"math"
	"strings"
)

// Schedule gives the learning rate of each optimizer update. It runs on the
// host: the trainer writes LR(step) into the compiled step's lr input.
type Schedule interface {
	// LR returns the learning rate of update step, the 0-based index of the
	// optimizer update (not of the microbatch). Negative steps count as 0.
	LR(step int) float64
	// Name returns the schedule's registry name, e.g. "cosine".
	Name() string
}

// Constant is a fixed learning rate.
type Constant struct {
	Rate float64 // the learning rate of every step
}

// LR returns Rate.
func (c Constant) LR(int) float64 { return c.Rate }

// Name returns "constant".
func (c Constant) Name() string { return "constant" }

// WarmupCosine warms up linearly, lr = Peak·(step+1)/(Warmup+1) for step <
// Warmup (as nanoGPT does: the rate rises every step and reaches Peak at
// step Warmup, never holding it for two steps), then follows a half cosine
// from exactly Peak at step Warmup down to Min at step Total−1, and stays at
// Min after. When Warmup = Total−1 the cosine has a single step, at Peak.
type WarmupCosine struct {
	Peak, Min     float64
	Warmup, Total int
}

// LR returns the learning rate of update step.
func (s WarmupCosine) LR(step int) float64 {
	step = max(step, 0)
	if step < s.Warmup {
		return warmupLR(s.Peak, step, s.Warmup)
	}
	if step >= s.Total {
		return s.Min
	}
	span := s.Total - 1 - s.Warmup
	if span <= 0 {
		return s.Peak
	}
	progress := float64(step-s.Warmup) / float64(span)
	return s.Min + (s.Peak-s.Min)*0.5*(1+math.Cos(math.Pi*progress))
}

// Name returns "cosine".
func (s WarmupCosine) Name() string { return "cosine" }

// WarmupStableDecay warms up like WarmupCosine, holds Peak, then decays
// linearly over the last DecayFraction of Total: with n = round(DecayFraction
// ·Total) decay steps, step Total−n+k (k = 0…n−1) has lr = Peak −
// (Peak−Min)·(k+1)/n, so the last step, Total−1, is at Min; steps from Total
// on stay at Min.
type WarmupStableDecay struct {
	Peak, Min     float64
	Warmup, Total int
	DecayFraction float64
}

// decaySteps returns the number of decay steps, round(DecayFraction·Total).
func (s WarmupStableDecay) decaySteps() int {
	return int(math.Round(s.DecayFraction * float64(s.Total)))
}

// LR returns the learning rate of update step.
func (s WarmupStableDecay) LR(step int) float64 {
	step = max(step, 0)
	if step < s.Warmup {
		return warmupLR(s.Peak, step, s.Warmup)
	}
	if step >= s.Total {
		return s.Min
	}
	n := s.decaySteps()
	start := s.Total - n
	if step < start {
		return s.Peak
	}
	return s.Peak - (s.Peak-s.Min)*float64(step-start+1)/float64(n)
}

// Name returns "wsd".
func (s WarmupStableDecay) Name() string { return "wsd" }

// warmupLR is the linear warm-up Peak·(step+1)/(warmup+1), which rises
// every step up to step warmup−1 and leaves Peak itself to step warmup.
func warmupLR(peak float64, step, warmup int) float64 {
	return peak * float64(step+1) / float64(warmup+1)
}

// scheduleNames lists NewSchedule's names.
var scheduleNames = []string{"constant", "cosine", "wsd"}

// ScheduleNames returns the schedule names NewSchedule accepts.
func ScheduleNames() []string { return append([]string(nil), scheduleNames...) }

// NewSchedule builds the schedule called name: "constant" (peak at every
// step; the other arguments are ignored), "cosine" (WarmupCosine) or "wsd"
// (WarmupStableDecay). It requires a finite peak > 0, and for cosine and
// wsd 0 <= minLR <= peak, 0 <= warmup < total, and for wsd
// 0 <= decayFraction <= 1 with the decay steps not overlapping the warm-up.
func NewSchedule(name string, peak, minLR float64, warmup, total int, decayFraction float64) (Schedule, error) {
	if !(peak > 0) || math.IsInf(peak, 0) {
		return nil, fmt.Errorf("optim: schedule %s: peak lr = %v, want a finite value > 0", name, peak)
	}
	switch name {
	case "constant":
		return Constant{Rate: peak}, nil
	case "cosine", "wsd":
	default:
		return nil, fmt.Errorf("optim: unknown schedule %q: want one of %s", name, strings.Join(scheduleNames, ", "))
	}
	if !(minLR >= 0 && minLR <= peak) {
		return nil, fmt.Errorf("optim: schedule %s: min lr = %v, want 0 <= min <= peak (%v)", name, minLR, peak)
	}
	if warmup < 0 {
		return nil, fmt.Errorf("optim: schedule %s: warmup = %d, want >= 0", name, warmup)
	}
	if total <= warmup {
		return nil, fmt.Errorf("optim: schedule %s: total = %d with warmup = %d, want total > warmup", name, total, warmup)
	}
	if name == "cosine" {
		return WarmupCosine{Peak: peak, Min: minLR, Warmup: warmup, Total: total}, nil
	}
	if !(decayFraction >= 0 && decayFraction <= 1) {
		return nil, fmt.Errorf("optim: schedule wsd: decay fraction = %v, want 0 <= fraction <= 1", decayFraction)
	}
	s := WarmupStableDecay{Peak: peak, Min: minLR, Warmup: warmup, Total: total, DecayFraction: decayFraction}
	if n := s.decaySteps(); n > total-warmup {
		return nil, fmt.Errorf("optim: schedule wsd: decay fraction = %v gives %d decay steps of total = %d, overlapping warmup = %d (at most %d decay steps fit)",
			decayFraction, n, total, warmup, total-warmup)
	}
	return s, nil
}
