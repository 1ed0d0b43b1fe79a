package hf

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/posttrainllm/posttrainllm/mlx"
	"github.com/posttrainllm/posttrainllm/model"
)

// Save writes m's parameters (in m's Specs order) as a Hugging Face folder
// dir: config.json and model.safetensors with the family's tensor names,
// in the parameters' dtype. dir must not exist or be empty; the files are
// written into a temporary folder beside it that is renamed into place,
// so a failure leaves nothing half-written. The files named by extra (a
// tokenizer's, say) are copied into the folder too. It returns the family.
func Save(dir string, m *model.TinyGPT, params []*mlx.Array, extra ...string) (string, error) {
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
	cfgJSON, err := json.MarshalIndent(exportConfig(m.Config, family), "", "  ")
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
		out := fromParams(family, m.Config, named)
		for name, a := range out {
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
