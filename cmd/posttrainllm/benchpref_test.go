package main

import (
	"strings"
	"testing"
)

// bench --finetune lora --objective dpo times the DPO step beside the
// supervised one of the same shape and prints their ratios; an unknown
// objective and --beta without one are usage errors.
func TestBenchFinetuneObjective(t *testing.T) {
	r := mustRun(t, "bench", "--preset", "tiny", "--device", "cpu", "--finetune", "lora", "--objective", "dpo", "--steps", "3", "--warmup-steps", "1")
	if !strings.Contains(r.stdout, "tiny/lora/dpo") || !strings.Contains(r.stdout, "ms vs sft") || !strings.Contains(r.stdout, "0.693->") {
		t.Errorf("bench output lacks the DPO step, its ratios or its ln 2 start:\n%s", r.stdout)
	}
	for _, args := range [][]string{{"--objective", "kto"}, {"--beta", "0.5"}} {
		r := runCLI(t, append([]string{"bench", "--preset", "tiny", "--device", "cpu", "--finetune", "lora", "--steps", "1"}, args...)...)
		if r.code != 2 || !strings.Contains(r.stderr, args[0]) {
			t.Errorf("bench %v: exit %d, stderr %q; want a usage error naming %s", args, r.code, r.stderr, args[0])
		}
	}
}
