package hf

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/posttrainllm/posttrainllm/mlx"
	"github.com/posttrainllm/posttrainllm/model"
)

// quantizeFolder writes the float folder src as an MLX-quantized folder,
// the way mlx_lm.convert -q lays it out: every matrix whose input side the
// group size divides (projections and the embedding) as its packed
// "weight", "scales" and "biases", and config.json's quantization (and
// quantization_config). It returns the new folder.
func quantizeFolder(t *testing.T, src string, groupSize, bits int) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "quantized")
	if err := os.MkdirAll(dst, 0o755); err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := json.Unmarshal(readFile(t, filepath.Join(src, ConfigFile)), &cfg); err != nil {
		t.Fatal(err)
	}
	q := map[string]any{"group_size": groupSize, "bits": bits, "mode": "affine"}
	cfg["quantization"], cfg["quantization_config"] = q, q
	b, _ := json.Marshal(cfg)
	if err := os.WriteFile(filepath.Join(dst, ConfigFile), b, 0o644); err != nil {
		t.Fatal(err)
	}
	mlx.Run(func() []*mlx.Array {
		tensors, err := readTensors(src, false)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]*mlx.Array{}
		for name, a := range tensors {
			stem, isWeight := strings.CutSuffix(name, ".weight")
			if !isWeight || a.Ndim() != 2 || a.Dim(1)%groupSize != 0 {
				out[name] = a
				continue
			}
			out[name], out[stem+".scales"], out[stem+".biases"] = mlx.Quantize(a, groupSize, bits)
		}
		if err := mlx.SaveSafetensors(filepath.Join(dst, WeightsFile), out, nil); err != nil {
			t.Fatal(err)
		}
		return nil
	})
	return dst
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// floatFolder saves a freshly initialised model of the config.json text
// cfgJSON as a float folder.
func floatFolder(t *testing.T, cfgJSON string) (string, *model.Transformer) {
	t.Helper()
	cfg, _, err := ParseConfig([]byte(cfgJSON), "")
	if err != nil {
		t.Fatal(err)
	}
	m, err := model.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "float")
	mlx.Run(func() []*mlx.Array {
		params, err := m.Init(2)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := Save(dir, m, params); err != nil {
			t.Fatal(err)
		}
		mlx.Free(params...)
		return nil
	})
	return dir, m
}

// An MLX-quantized folder maps onto the float folder's model.Config.
// LoadQuantized keeps every block projection, the token embedding and the
// untied output head packed, with their scales and biases; Load
// dequantizes everything, to exactly the dequantized values of the packed
// tensors.
func TestLoadQuantizedKeepsProjectionsPacked(t *testing.T) {
	const cfgJSON = `{"model_type":"llama","vocab_size":300,"hidden_size":64,"intermediate_size":128,` +
		`"num_hidden_layers":2,"num_attention_heads":4,"max_position_embeddings":64}`
	src, m := floatFolder(t, cfgJSON)
	dst := quantizeFolder(t, src, 32, 4)
	fc, _, err := ReadConfig(src, "")
	if err != nil {
		t.Fatal(err)
	}
	qc, _, err := ReadConfig(dst, "")
	if err != nil || qc != fc {
		t.Fatalf("the quantized folder's config: %+v, %v; want the float folder's %+v", qc, err, fc)
	}
	if q, err := ReadQuantization(dst); err != nil || q == nil || *q != (Quantization{GroupSize: 32, Bits: 4}) {
		t.Fatalf("ReadQuantization: %+v, %v; want groups of 32, 4 bits", q, err)
	}
	kept, err := LoadQuantized(dst, "")
	if err != nil {
		t.Fatal(err)
	}
	defer kept.Free()
	deq, err := Load(dst, "")
	if err != nil {
		t.Fatal(err)
	}
	defer deq.Free()
	if kept.Quant == nil || len(kept.Quant.Indices) != 7*fc.Layers+2 {
		t.Fatalf("LoadQuantized kept %+v quantized, want the 7 projections of each of %d layers, the embedding and the head", kept.Quant, fc.Layers)
	}
	mlx.Run(func() []*mlx.Array {
		for k, i := range kept.Quant.Indices {
			name := m.Specs[i].Name
			if !m.Specs[i].Quantizable() || kept.Params[i].Dtype() != mlx.Uint32 {
				t.Errorf("slot %s kept quantized is %v", name, kept.Params[i].Dtype())
			}
			w := mlx.Dequantize(kept.Params[i], kept.Quant.Scales[k], kept.Quant.Biases[k], 32, 4)
			sameBits(t, name, deq.Params[i], w)
		}
		for i, s := range m.Specs {
			if deq.Params[i].Dtype() != mlx.Float32 {
				t.Errorf("Load: %s is %v, want float32", s.Name, deq.Params[i].Dtype())
			}
			if (s.Kind == model.Embedding || s.Kind == model.Head) && !slices.Contains(kept.Quant.Indices, i) {
				t.Errorf("LoadQuantized dequantized %s", s.Name)
			}
		}
		return nil
	})
}

// What the quantized layout cannot be read as is refused, naming it.
func TestLoadQuantizedRefusals(t *testing.T) {
	const cfgJSON = `{"model_type":"llama","vocab_size":300,"hidden_size":64,"intermediate_size":128,` +
		`"num_hidden_layers":1,"num_attention_heads":4,"max_position_embeddings":64}`
	src, _ := floatFolder(t, cfgJSON)
	dst := quantizeFolder(t, src, 64, 8)
	mlx.Run(func() []*mlx.Array {
		tensors, err := readTensors(dst, true)
		if err != nil {
			t.Fatal(err)
		}
		delete(tensors, "model.layers.0.mlp.up_proj.biases")
		if err := mlx.SaveSafetensors(filepath.Join(dst, WeightsFile), tensors, nil); err != nil {
			t.Fatal(err)
		}
		return nil
	})
	if _, err := LoadQuantized(dst, ""); err == nil || !strings.Contains(err.Error(), "model.layers.0.mlp.up_proj.biases") {
		t.Errorf("a packed weight without its biases: %v, want an error naming them", err)
	}
	for _, c := range []struct{ json, want string }{
		{`{` + llamaFields + `,"quantization_config":{"quant_method":"gptq","bits":4,"group_size":128}}`, `quant_method "gptq"`},
		{`{` + llamaFields + `,"quantization":{"group_size":32,"bits":4,"mode":"mxfp4"}}`, `mode "mxfp4"`},
		{`{` + llamaFields + `,"quantization":{"group_size":48,"bits":4}}`, "group size 48"},
		{`{` + llamaFields + `,"quantization":{"group_size":64,"bits":7}}`, "bits 7"},
		{`{` + gpt2Fields + `,"quantization":{"group_size":64,"bits":4}}`, "gpt2"},
	} {
		if _, _, err := ParseConfig([]byte(c.json), ""); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error naming %s", c.json, err, c.want)
		}
	}
}
