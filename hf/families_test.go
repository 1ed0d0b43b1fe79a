package hf

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// Each Llama-shaped family, as a random-weight folder whose config.json
// has the keys of a published checkpoint of that family, gives the numpy
// reference's logits after import, exports as the same family (Phi-3's
// projections fused again) and imports back bit for bit: Llama 3 with its
// scaled frequencies and a head_dim other than hidden_size/heads, with and
// without attention biases; Mistral; Qwen2 (q/k/v biases) tied and untied;
// Qwen3 (q/k norms, its own head_dim) with and without attention biases;
// Phi-3 (fused qkv_proj and gate_up_proj).
func TestFamiliesMatchReference(t *testing.T) {
	cases := []struct {
		family, want, dtype string
		extra               []string
	}{
		{"llama3", Llama, "float32", []string{"--tied"}},
		{"llama3", Llama, "bfloat16", []string{"--attention-bias"}},
		{"mistral", Mistral, "float32", nil},
		{"qwen2", Qwen2, "float32", []string{"--tied"}},
		{"qwen2", Qwen2, "float16", nil},
		{"qwen3", Qwen3, "float32", []string{"--tied"}},
		{"qwen3", Qwen3, "float32", []string{"--attention-bias"}},
		{"phi3", Phi3, "float32", nil},
		{"phi3", Phi3, "bfloat16", []string{"--tied"}},
	}
	// Past the 8 positions below which Llama 3's stretched frequencies
	// barely turn, so the scaling shows in the logits.
	tokens := []int32{3, 17, 0, 42, 42, 9, 88, 1, 64, 5, 23, 77, 12, 12, 90, 31, 2, 55, 8, 70, 19, 46, 33, 100}
	for i, c := range cases {
		t.Run(fmt.Sprintf("%s-%s%v", c.family, c.dtype, c.extra), func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "hf")
			runReference(t, append([]string{"make", dir, "--family", c.family, "--dtype", c.dtype, "--seed", strconv.Itoa(20 + i)}, c.extra...)...)
			checkAgainstReference(t, dir, c.want, tokens)
		})
	}
}

// The reference's Llama 3 frequencies change its logits well beyond the
// tolerance the import is held to, so matching them shows that the model
// scales them as Llama 3 does rather than not at all.
func TestLlama3ScalingChangesTheReference(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "hf")
	runReference(t, "make", dir, "--family", "llama3", "--seed", "3")
	tokens := []int32{3, 17, 0, 42, 42, 9, 88, 1, 64, 5, 23, 77, 12, 12, 90, 31}
	scaled := referenceLogits(t, dir, tokens)
	path := filepath.Join(dir, ConfigFile)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := json.Unmarshal(b, &cfg); err != nil {
		t.Fatal(err)
	}
	cfg["rope_scaling"] = nil
	if b, err = json.Marshal(cfg); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	plain := referenceLogits(t, dir, tokens)
	scale, diff := 0.0, 0.0
	for i := range scaled {
		scale = math.Max(scale, math.Abs(float64(scaled[i])))
		diff = math.Max(diff, math.Abs(float64(scaled[i]-plain[i])))
	}
	if diff < 1e-2*scale {
		t.Fatalf("llama3 rope_scaling moves the reference logits by %g at scale %g; the family test could not tell it from none", diff, scale)
	}
}
