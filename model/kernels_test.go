package model

import "testing"

// kernelUse decides by configuration which CUDA kernels a forward pass
// may use: configurations a kernel computes exactly keep it (q/k/v biases
// are added before the heads kernel; any head width and head counts are
// its template arguments), and the others fall back to MLX's operations
// (Llama 3's scaled frequencies, Qwen3's per-head q/k norms and Gemma's
// second rotary base for the heads kernel; LayerNorm and wide rows for the
// RMSNorm kernels).
func TestKernelUseByConfiguration(t *testing.T) {
	fam := familyConfigs()
	wide := fam["llama"]
	wide.DModel, wide.Heads, wide.KVHeads = 2048, 16, 4
	subUnitBase := fam["llama"]
	subUnitBase.RoPEBase = 0.5
	headDimOnly := fam["llama"]
	headDimOnly.HeadDimension = 24
	localBase := fam["mistral"]
	localBase.RoPELocalBase = 10000
	for _, c := range []struct {
		name        string
		cfg         Config
		heads, norm bool
	}{
		{"tinygpt", fam["tinygpt"], true, true},
		{"gpt2 (learned positions: no rotation; LayerNorm)", fam["gpt2"], true, false},
		{"llama (linear rope scale)", fam["llama"], true, true},
		{"llama3 (scaled frequencies)", fam["llama3"], false, true},
		{"qwen2 (q/k/v biases)", fam["qwen2"], true, true},
		{"qwen3 (q/k norms)", fam["qwen3"], false, true},
		{"head_dim other than d_model/heads", headDimOnly, true, true},
		{"d_model above the norm kernels' rows", wide, true, false},
		{"rope base below 1", subUnitBase, false, true},
		{"mistral (sliding window: a mask, one rotary base)", fam["mistral"], true, true},
		{"sliding layers with a rotary base of their own", localBase, false, true},
		{"gemma3 (q/k norms, two rotary bases)", fam["gemma3"], false, true},
	} {
		cfg := c.cfg.WithDefaults()
		if err := cfg.Validate(); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		got := cfg.kernelUse(2, 16)
		if got.heads != c.heads || got.norm != c.norm {
			t.Errorf("%s: kernels heads %v, norm %v; want heads %v, norm %v", c.name, got.heads, got.norm, c.heads, c.norm)
		}
	}
	// The heads kernel indexes its threads with 32 bits.
	if cfg := fam["llama"].WithDefaults(); cfg.kernelUse(1<<16, 1<<12).heads {
		t.Error("heads kernel chosen for more threads than 32-bit indices reach")
	}
}
