package rl

import (
	"math"
	"strings"
	"testing"
)

// rewards12 are three groups of four: mixed, all equal, and mixed
// again. By hand: group means 0.5, 0.5 and 1; group sample standard
// deviations √(4·0.25/3) = √(1/3), 0 and √(2/3); the batch's mean is
// 8/12 = 2/3 and its sample standard deviation √((11/3)/11) = √(1/3).
var rewards12 = []float64{1, 0, 0, 1, 0.5, 0.5, 0.5, 0.5, 2, 0, 1, 1}

func TestGroupAdvantages(t *testing.T) {
	g1, g3 := math.Sqrt(1.0/3)+1e-4, math.Sqrt(2.0/3)+1e-4
	batch := math.Sqrt(1.0/3) + 1e-4
	for _, tc := range []struct {
		scale Scale
		want  []float64
	}{
		{ScaleGroup, []float64{0.5 / g1, -0.5 / g1, -0.5 / g1, 0.5 / g1, 0, 0, 0, 0, 1 / g3, -1 / g3, 0, 0}},
		{ScaleBatch, []float64{0.5 / batch, -0.5 / batch, -0.5 / batch, 0.5 / batch, 0, 0, 0, 0, 1 / batch, -1 / batch, 0, 0}},
		{ScaleNone, []float64{0.5, -0.5, -0.5, 0.5, 0, 0, 0, 0, 1, -1, 0, 0}},
	} {
		got, err := GroupAdvantages(rewards12, 4, tc.scale)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(tc.want) {
			t.Fatalf("%s: %d advantages, want %d", tc.scale, len(got), len(tc.want))
		}
		for i := range tc.want {
			if math.Abs(got[i]-tc.want[i]) > 1e-12 {
				t.Errorf("%s: advantage %d = %.17g, want %.17g", tc.scale, i, got[i], tc.want[i])
			}
		}
	}
	// Spot values, written out: 0.5/(0.5773502691896258+1e-4) and
	// 1/(0.816496580927726+1e-4).
	got, _ := GroupAdvantages(rewards12, 4, ScaleGroup)
	if math.Abs(got[0]-0.86587) > 1e-5 || math.Abs(got[8]-1.22459) > 1e-5 {
		t.Errorf("advantages %v and %v, want 0.86587 and 1.22459", got[0], got[8])
	}
}

func TestGroupAdvantagesEqualRewardsAreZero(t *testing.T) {
	// 0.1 and 0.7 three times sum to values that a plain mean rounds off
	// their own, which would leave tiny non-zero advantages.
	rewards := []float64{0.1, 0.1, 0.1, 0.7, 0.7, 0.7, -3, -3, -3}
	for _, scale := range []Scale{ScaleGroup, ScaleBatch, ScaleNone} {
		got, err := GroupAdvantages(rewards, 3, scale)
		if err != nil {
			t.Fatal(err)
		}
		for i, a := range got {
			if a != 0 {
				t.Errorf("%s: advantage %d = %g, want exactly 0", scale, i, a)
			}
		}
	}
	// A group of one has nothing to compare with: zero, not NaN.
	got, err := GroupAdvantages([]float64{1, 5}, 1, ScaleGroup)
	if err != nil || got[0] != 0 || got[1] != 0 {
		t.Errorf("groups of one: %v, %v; want [0 0]", got, err)
	}
}

func TestGroupAdvantagesErrors(t *testing.T) {
	for _, tc := range []struct {
		rewards []float64
		size    int
		scale   Scale
		want    string
	}{
		{[]float64{1, 2}, 0, ScaleGroup, "group size 0, want >= 1"},
		{[]float64{1, 2}, -2, ScaleGroup, "group size -2"},
		{nil, 4, ScaleGroup, "no rewards"},
		{[]float64{1, 2, 3, 4, 5}, 4, ScaleGroup, "5 rewards, want a multiple of the group size 4"},
		{[]float64{1, 2}, 2, "std", `scale "std"`},
		{[]float64{1, math.NaN()}, 2, ScaleNone, "reward 1 is NaN"},
	} {
		if _, err := GroupAdvantages(tc.rewards, tc.size, tc.scale); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("GroupAdvantages(%v, %d, %q): error %v, want one containing %q", tc.rewards, tc.size, tc.scale, err, tc.want)
		}
	}
}

func TestParseScale(t *testing.T) {
	for _, s := range []Scale{ScaleGroup, ScaleBatch, ScaleNone} {
		if got, err := ParseScale(string(s)); err != nil || got != s {
			t.Errorf("ParseScale(%q) = %q, %v", s, got, err)
		}
	}
	for _, s := range []string{"", "Group", "std"} {
		if _, err := ParseScale(s); err == nil || !strings.Contains(err.Error(), "want group, batch or none") {
			t.Errorf("ParseScale(%q): error %v, want one listing the scales", s, err)
		}
	}
}
