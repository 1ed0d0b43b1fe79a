package rl

import (
	"fmt"
	"math"
)

// Scale says what GroupAdvantages divides the centred rewards by.
type Scale string

// Advantage scalings, as TRL's scale_rewards.
const (
	// ScaleGroup divides by the group's standard deviation: GRPO.
	ScaleGroup Scale = "group"
	// ScaleBatch divides by the whole batch's standard deviation, which
	// keeps easy and hard prompts' groups on one scale.
	ScaleBatch Scale = "batch"
	// ScaleNone does not divide: Dr. GRPO, which drops the division
	// for its bias towards groups of nearly equal rewards.
	ScaleNone Scale = "none"
)

// advantageEps keeps the division finite for a group of equal rewards,
// as TRL's 1e-4.
const advantageEps = 1e-4

// ParseScale reads a Scale by name: "group", "batch" or "none".
func ParseScale(s string) (Scale, error) {
	switch sc := Scale(s); sc {
	case ScaleGroup, ScaleBatch, ScaleNone:
		return sc, nil
	}
	return "", fmt.Errorf("advantage scale %q: want group, batch or none", s)
}

// GroupAdvantages returns each reward minus the mean of its group, the
// groups being consecutive runs of groupSize rewards (one prompt's
// completions), divided by the group's sample standard deviation (n−1,
// as torch.std and TRL) plus 1e-4 for ScaleGroup, by the whole batch's
// sample standard deviation plus 1e-4 for ScaleBatch, and not divided
// for ScaleNone. A group of equal rewards gets exactly zero advantages:
// it says nothing about which completion is better. The standard
// deviation of a single reward counts as 0. len(rewards) must be a
// positive multiple of groupSize, and every reward finite.
func GroupAdvantages(rewards []float64, groupSize int, scale Scale) ([]float64, error) {
	switch {
	case groupSize < 1:
		return nil, fmt.Errorf("advantages: group size %d, want >= 1", groupSize)
	case len(rewards) == 0:
		return nil, fmt.Errorf("advantages: no rewards; want a positive multiple of the group size %d", groupSize)
	case len(rewards)%groupSize != 0:
		return nil, fmt.Errorf("advantages: %d rewards, want a multiple of the group size %d", len(rewards), groupSize)
	}
	if _, err := ParseScale(string(scale)); err != nil {
		return nil, fmt.Errorf("advantages: %w", err)
	}
	for i, r := range rewards {
		if math.IsNaN(r) || math.IsInf(r, 0) {
			return nil, fmt.Errorf("advantages: reward %d is %v, want a finite number", i, r)
		}
	}
	batchStd := sampleStd(rewards, mean(rewards))
	out := make([]float64, len(rewards))
	for g := 0; g < len(rewards); g += groupSize {
		group := rewards[g : g+groupSize]
		m := mean(group)
		div := 1.0
		switch scale {
		case ScaleGroup:
			div = sampleStd(group, m) + advantageEps
		case ScaleBatch:
			div = batchStd + advantageEps
		}
		for i, r := range group {
			out[g+i] = (r - m) / div
		}
	}
	return out, nil
}

// mean is the mean of xs, computed as an offset from xs[0] so that equal
// values give exactly that value (a plain sum can round 3×0.1 away from
// 0.3, leaving a tiny non-zero advantage).
func mean(xs []float64) float64 {
	var d float64
	for _, x := range xs {
		d += x - xs[0]
	}
	return xs[0] + d/float64(len(xs))
}

// sampleStd is the sample standard deviation of xs about their mean m
// (divided by n−1); 0 for fewer than two values.
func sampleStd(xs []float64, m float64) float64 {
	if len(xs) < 2 {
		return 0
	}
	var ss float64
	for _, x := range xs {
		ss += (x - m) * (x - m)
	}
	return math.Sqrt(ss / float64(len(xs)-1))
}
