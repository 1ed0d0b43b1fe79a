package train

import (
	"strings"
	"testing"

	"github.com/posttrainllm/posttrainllm/model"
)

// A state.json written before the gelu model option reads as the exact
// GELU, the activation those checkpoints were trained with, so it equals
// the defaulted config a resumed run compares it with.
func TestStateWithoutGELUReadsAsExact(t *testing.T) {
	old := `{"format":1,"step":200,"config":{"model":{"vocab_size":256,"d_model":64,"layers":2,"heads":4,"context":64,
		"mlp_ratio":4,"dtype":"float32","rope_base":10000,"norm_eps":1e-05,"init_std":0.02},
		"tokenizer":"byte","steps":300,"batch":8,"accum":1,"optimizer":"adamw","schedule":"cosine","lr":0.003,"warmup":20,
		"compile":true,"device":"cpu","log_every":10,"eval_every":100,"checkpoint_every":100,
		"keep_checkpoints":3,"prefetch_depth":2},"sampler_state":null,"tokens_seen":0,"elapsed_s":0}`
	st, err := ParseRunState([]byte(old))
	if err != nil {
		t.Fatalf("a state.json without gelu does not load: %v", err)
	}
	if st.Config.Model.GELU != model.GELUExact || st.Config.Model != st.Config.WithDefaults().Model {
		t.Fatalf("model config without gelu loads as %+v, want gelu %q and equal to its defaults", st.Config.Model, model.GELUExact)
	}
	tanh := strings.Replace(old, `"mlp_ratio":4,`, `"mlp_ratio":4,"gelu":"tanh",`, 1)
	if st, err := ParseRunState([]byte(tanh)); err != nil || st.Config.Model.GELU != model.GELUTanh {
		t.Fatalf("gelu tanh loads as %q (%v)", st.Config.Model.GELU, err)
	}
	bad := strings.Replace(old, `"mlp_ratio":4,`, `"mlp_ratio":4,"gelu":"erf",`, 1)
	if _, err := ParseRunState([]byte(bad)); err == nil || !strings.Contains(err.Error(), `"erf"`) {
		t.Fatalf("gelu erf: want an error naming it, got %v", err)
	}
}
