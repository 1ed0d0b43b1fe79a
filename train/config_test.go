package train

import (
	"encoding/json"
	"strings"
	"testing"
)

// Checkpoints and presets written before eval_tokens existed give
// eval_batches; it loads as the tokens those batches covered.
func TestOldEvalBatchesLoadsAsEvalTokens(t *testing.T) {
	old := `{"format":1,"step":200,"config":{"model":{"vocab_size":256,"d_model":64,"layers":2,"heads":4,"context":64,
		"mlp_ratio":4,"dtype":"float32","rope_base":10000,"norm_eps":1e-05,"init_std":0.02},
		"tokenizer":"byte","steps":300,"batch":8,"accum":1,"optimizer":"adamw","schedule":"cosine","lr":0.003,"warmup":20,
		"compile":true,"device":"cpu","log_every":10,"eval_every":100,"eval_batches":4,"checkpoint_every":100,
		"keep_checkpoints":3,"prefetch_depth":2},"sampler_state":null,"tokens_seen":0,"elapsed_s":0}`
	st, err := ParseRunState([]byte(old))
	if err != nil {
		t.Fatalf("a state.json with eval_batches does not load: %v", err)
	}
	if st.Config.EvalTokens != 4*8*64 || st.Config.EvalBatches() != 4 {
		t.Fatalf("eval_batches 4 of batch 8 × context 64 loaded as eval_tokens %d (%d batches), want 2048 (4)",
			st.Config.EvalTokens, st.Config.EvalBatches())
	}
	if err := st.Config.WithDefaults().Validate(); err != nil {
		t.Fatal(err)
	}
	// Written back, it says eval_tokens only.
	js, err := json.Marshal(st.Config)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(js), "eval_batches") || !strings.Contains(string(js), `"eval_tokens":2048`) {
		t.Fatalf("the config marshals as %s", js)
	}
	for name, bad := range map[string]string{
		"both":          strings.Replace(old, `"eval_batches":4`, `"eval_batches":4,"eval_tokens":100`, 1),
		"negative":      strings.Replace(old, `"eval_batches":4`, `"eval_batches":-1`, 1),
		"unknown field": strings.Replace(old, `"eval_batches":4`, `"eval_batches":4,"colour":"blue"`, 1),
	} {
		if _, err := ParseRunState([]byte(bad)); err == nil {
			t.Errorf("%s: state.json accepted", name)
		}
	}
}
