package finetune

import (
	"time"

	"github.com/posttrainllm/posttrainllm/rl"
)

// grpoStats sums a GRPO run's rollout metrics (rl.UpdateStats) over the
// batches drawn since the last log line.
type grpoStats struct {
	n, steps int
	sums     map[string]float64
	lenMax   int
}

// add records one batch's metrics; stepTime is the time from the
// previous batch's return to this one's arrays being ready (the update
// and its logging), unknown for the run's first batch.
func (s *grpoStats) add(u rl.UpdateStats, stepTime time.Duration, first bool) {
	if s.sums == nil {
		s.sums = map[string]float64{}
	}
	s.n++
	add := func(k string, v float64) { s.sums[k] += v }
	add("reward", u.RewardMean)
	add("reward_std", u.RewardStd)
	for name, v := range u.Rewards {
		add("reward/"+name, v)
	}
	add("advantage_std", u.AdvantageStd)
	add("completion_len", u.LengthMean)
	add("truncated", u.TruncatedFraction)
	add("rollout_s", u.Rollout.Seconds())
	add("scoring_s", u.Scoring.Seconds())
	add("gen_tok_s", u.GeneratedTokensPerSecond)
	s.lenMax = max(s.lenMax, u.LengthMax)
	if !first {
		s.steps++
		add("update_s", stepTime.Seconds())
	}
}

// flush returns the means since the last flush and starts over; nil when
// no batch was drawn since.
func (s *grpoStats) flush() map[string]float64 {
	if s.n == 0 {
		return nil
	}
	out := make(map[string]float64, len(s.sums)+1)
	for k, v := range s.sums {
		d := float64(s.n)
		if k == "update_s" {
			d = float64(s.steps)
		}
		out[k] = v / d
	}
	out["completion_len_max"] = float64(s.lenMax)
	*s = grpoStats{}
	return out
}
