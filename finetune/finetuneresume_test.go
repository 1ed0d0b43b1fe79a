package finetune

import (
	"strings"
	"testing"

	"github.com/posttrainllm/posttrainllm/internal/runtest"
)

// ResumeConflict names the first setting given sets that differs from the
// saved one, reads a context of 0 as the base's and a group size of 0 as
// the default, and refuses a key that names no setting.
func TestResumeConflict(t *testing.T) {
	saved := Config{Base: "/b", Train: "/t.jsonl", Method: MethodLoRA, Rank: 8, Alpha: 16, Targets: []string{"attn"}, Quantize: 4}
	given := saved
	given.Rank, given.Context, given.QGroupSize = 4, 512, DefaultQuantGroupSize
	for _, c := range []struct {
		keys           []string
		key, has, want string
	}{
		{[]string{"method", "alpha"}, "", "", ""},
		{[]string{"alpha", "rank"}, "rank", "8", "4"},
		{[]string{"context"}, "", "", ""}, // the base's context is 512
		{[]string{"q_group_size", "quantize"}, "", "", ""},
		{[]string{"objective"}, "", "", ""}, // "" is sft
		{nil, "rank", "8", "4"},
	} {
		key, has, want, err := saved.ResumeConflict(given, c.keys, 512)
		if err != nil || key != c.key || has != c.has || want != c.want {
			t.Errorf("keys %v: %q (saved %q, given %q), %v; want %q (%q, %q)", c.keys, key, has, want, err, c.key, c.has, c.want)
		}
	}
	if key, has, want, _ := saved.ResumeConflict(given, []string{"context"}, 1024); key != "context" || has != "1024" || want != "512" {
		t.Errorf("context against a base of 1024: %q %q %q, want context 1024 512", key, has, want)
	}
	if _, _, _, err := saved.ResumeConflict(given, []string{"lr"}, 512); err == nil || !strings.Contains(err.Error(), `"lr"`) {
		t.Errorf("unknown key: %v", err)
	}
}

// A fine-tune's defaults keep the base's model and replace its run:
// the method's learning rate, a warm-up shrunk to fit a short run.
func TestFineTuneDefaults(t *testing.T) {
	base := runtest.TinyConfig()
	base.LR, base.Steps, base.KeepBest = 0.5, 10_000, true
	c := Defaults(base, MethodLoRA)
	if c.Model != base.Model || c.LR != DefaultAdapterLR || c.Steps != 200 || c.KeepBest || c.EvalEvery != 50 {
		t.Errorf("defaults over the base: %+v", c)
	}
	if f := Defaults(base, MethodFull); f.LR != DefaultFullLR {
		t.Errorf("full fine-tune lr %g, want %g", f.LR, DefaultFullLR)
	}
	c.Steps = 6
	if w := c.FitWarmup().Warmup; w != 3 {
		t.Errorf("warm-up 10 over 6 steps became %d, want 3", w)
	}
	c.Schedule = "constant"
	if w := c.FitWarmup().Warmup; w != 10 {
		t.Errorf("constant schedule's warm-up became %d, want it left at 10", w)
	}
}
