package hf

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/posttrainllm/posttrainllm/mlx"
	"github.com/posttrainllm/posttrainllm/model"
)

// Save writes m's parameters (in m's Specs order) as a Hugging Face folder
// dir: config.json and model.safetensors with the family's tensor names,
// in the parameters' dtype. dir must not exist or be empty; the files are
// written into a temporary folder beside it that is renamed into place,
// so a failure leaves nothing half-written. The files named by extra (a
// tokenizer's, say) are copied into the folder too. It returns the family.
func Save(dir string, m *model.Transformer, params []*mlx.Array, extra ...string) (string, error) {
	return save(dir, m, params, nil, extra)
}

// SaveQuantized is Save for a model whose projections quant.Indices are
// held quantized: params[i] is then the packed uint32 weight, quant's
// Scales and Biases beside it. It writes the layout mlx-lm reads (as
// mlx_lm.convert -q writes it): config.json's "quantization" (and
// "quantization_config") with the group size and bits, and each quantized
// projection as its packed "weight", "scales" and "biases". A quantized
// projection the family stores fused or transposed (Phi-3's qkv_proj and
// gate_up_proj) is written dequantized, which mlx-lm loads as a float
// layer.
func SaveQuantized(dir string, m *model.Transformer, params []*mlx.Array, quant *QuantizedParams, extra ...string) (string, error) {
	if quant == nil || len(quant.Scales) != len(quant.Indices) || len(quant.Biases) != len(quant.Indices) {
		return "", fmt.Errorf("export: the quantized projections need a scales and a biases array each")
	}
	if err := mlx.CheckQuantization(quant.GroupSize, quant.Bits); err != nil {
		return "", fmt.Errorf("export: %w", err)
	}
	return save(dir, m, params, quant, extra)
}

// save is Save, or SaveQuantized when quant is not nil.
func save(dir string, m *model.Transformer, params []*mlx.Array, quant *QuantizedParams, extra []string) (string, error) {
	family, err := Family(m.Config)
	if err != nil {
		return "", fmt.Errorf("export: %w", err)
	}
	if len(params) != len(m.Specs) {
		return "", fmt.Errorf("export: %d parameter arrays, the model has %d", len(params), len(m.Specs))
	}
	if entries, err := os.ReadDir(dir); err == nil && len(entries) > 0 {
		return "", fmt.Errorf("export: %s exists and is not empty; choose a new folder", dir)
	} else if err == nil {
		if err := os.Remove(dir); err != nil {
			return "", fmt.Errorf("export: %w", err)
		}
	}
	parent := filepath.Dir(filepath.Clean(dir))
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return "", fmt.Errorf("export: %w", err)
	}
	tmp, err := os.MkdirTemp(parent, ".tmp-export-")
	if err != nil {
		return "", fmt.Errorf("export: %w", err)
	}
	defer os.RemoveAll(tmp) // a no-op once renamed
	cfg := exportConfig(m.Config, family)
	if quant != nil {
		if family == GPT2 {
			return "", fmt.Errorf("export: MLX-quantized %s folders are not supported; fuse without --quantize for float weights", GPT2)
		}
		q := map[string]any{"group_size": quant.GroupSize, "bits": quant.Bits, "mode": "affine"}
		cfg["quantization"], cfg["quantization_config"] = q, q
	}
	cfgJSON, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return "", fmt.Errorf("export: %w", err)
	}
	if err := os.WriteFile(filepath.Join(tmp, ConfigFile), append(cfgJSON, '\n'), 0o644); err != nil {
		return "", fmt.Errorf("export: %w", err)
	}
	for _, f := range extra {
		if err := CopyFile(f, filepath.Join(tmp, filepath.Base(f))); err != nil {
			return "", fmt.Errorf("export: %w", err)
		}
	}
	err = mlx.Do(func() error {
		s := mlx.NewScope()
		defer s.Close()
		named := make(map[string]*mlx.Array, len(params))
		for i, spec := range m.Specs {
			named[spec.Name] = params[i]
		}
		// A quantized projection maps through as its dequantized weight; the
		// tensors that are that array as it is are written packed.
		packed := map[*mlx.Array]int{}
		if quant != nil {
			for k, i := range quant.Indices {
				d := mlx.Dequantize(params[i], quant.Scales[k], quant.Biases[k], quant.GroupSize, quant.Bits)
				named[m.Specs[i].Name] = d
				packed[d] = k
			}
		}
		tensors := fromParams(family, m.Config, named)
		out := make(map[string]*mlx.Array, len(tensors))
		for name, a := range tensors {
			if k, ok := packed[a]; ok {
				stem := strings.TrimSuffix(name, ".weight")
				out[name] = params[quant.Indices[k]]
				out[stem+".scales"], out[stem+".biases"] = quant.Scales[k], quant.Biases[k]
				continue
			}
			out[name] = mlx.Copy(a) // transposed and sliced views become contiguous
		}
		return mlx.SaveSafetensors(filepath.Join(tmp, WeightsFile), out, map[string]string{"format": "pt"})
	})
	if err != nil {
		return "", fmt.Errorf("export: %w", err)
	}
	if err := os.Rename(tmp, dir); err != nil {
		return "", fmt.Errorf("export: %w", err)
	}
	return family, nil
}
