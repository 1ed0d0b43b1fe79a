package main

import (
	le "encoding/binary"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// safetensorsNames returns the tensor names in a safetensors file's header.
func safetensorsNames(t *testing.T, path string) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) < 8 {
		t.Fatalf("%s: %d bytes, not a safetensors file", path, len(b))
	}
	n := le.LittleEndian.Uint64(b)
	var header map[string]json.RawMessage
	if n > uint64(len(b)-8) || json.Unmarshal(b[8:8+n], &header) != nil {
		t.Fatalf("%s: unreadable safetensors header", path)
	}
	names := map[string]bool{}
	for k := range header {
		if k != "__metadata__" {
			names[k] = true
		}
	}
	return names
}

// A Phi-3 and a Qwen3 folder go through the user's whole path, import, a
// DoRA fine-tune, fuse and export, and come out as the family they went
// in as: the exported config.json names the family and its class, and the
// tensors are laid out as the family lays them out (Phi-3's fused
// qkv_proj and gate_up_proj, Qwen3's q_norm and k_norm).
func TestFamiliesImportFineTuneFuseExport(t *testing.T) {
	for _, c := range []struct {
		family, class string
		has, hasNot   []string
	}{
		{"phi3", "Phi3ForCausalLM",
			[]string{"model.layers.1.self_attn.qkv_proj.weight", "model.layers.1.mlp.gate_up_proj.weight"},
			[]string{"model.layers.1.self_attn.q_proj.weight", "model.layers.1.mlp.up_proj.weight"}},
		{"qwen3", "Qwen3ForCausalLM",
			[]string{"model.layers.1.self_attn.q_norm.weight", "model.layers.1.self_attn.k_norm.weight", "model.layers.1.self_attn.q_proj.weight"},
			[]string{"model.layers.1.self_attn.q_proj.bias"}},
	} {
		t.Run(c.family, func(t *testing.T) {
			tmp := t.TempDir()
			folder := hfFolder(t, "--family", c.family, "--vocab", "300")
			run := filepath.Join(tmp, "run")
			mustRun(t, "import", folder, "--out", run, "--tokenizer", "byte", "--context", "32")
			ft := filepath.Join(tmp, "ft")
			records := writeRecords(t, tmp, "train.jsonl", 12)
			mustRun(t, "finetune", "--from", run, "--data", records, "--method", "dora", "--out", ft, "--steps", "2", "--batch", "2", "--no-progress")
			fused := filepath.Join(tmp, "fused")
			mustRun(t, "fuse", "--adapter", ft, "--out", fused)
			exported := filepath.Join(tmp, "exported")
			mustRun(t, "export", fused, exported)
			b, err := os.ReadFile(filepath.Join(exported, "config.json"))
			if err != nil {
				t.Fatal(err)
			}
			var cfg struct {
				ModelType     string   `json:"model_type"`
				Architectures []string `json:"architectures"`
			}
			if err := json.Unmarshal(b, &cfg); err != nil || cfg.ModelType != c.family || len(cfg.Architectures) != 1 || cfg.Architectures[0] != c.class {
				t.Fatalf("exported config.json: model_type %q, architectures %v (%v); want %s, %s", cfg.ModelType, cfg.Architectures, err, c.family, c.class)
			}
			names := safetensorsNames(t, filepath.Join(exported, "model.safetensors"))
			for _, n := range c.has {
				if !names[n] {
					t.Errorf("the export lacks %s", n)
				}
			}
			for _, n := range c.hasNot {
				if names[n] {
					t.Errorf("the export has %s, which %s does not lay out", n, c.family)
				}
			}
			// The export imports again, as the same family.
			mustRun(t, "import", exported, "--out", filepath.Join(tmp, "again"), "--tokenizer", "byte", "--context", "32")
		})
	}
}
