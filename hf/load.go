package hf

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/posttrainllm/posttrainllm/mlx"
	"github.com/posttrainllm/posttrainllm/model"
)

// Weight files of a folder: one file, or shards listed in an index.
const (
	WeightsFile = "model.safetensors"
	IndexFile   = "model.safetensors.index.json"
)

// Model is an imported Hugging Face model: its family, the model and its
// parameters in the model's Specs order, in the model's parameter dtype.
// The caller frees Params.
type Model struct {
	Family string
	Model  *model.Transformer
	Params []*mlx.Array
	// Quant, set by LoadQuantized for an MLX-quantized folder, says which
	// Params are packed quantized weights and holds their scales and
	// biases; nil when every parameter is float.
	Quant *QuantizedParams
}

// Free releases the parameters.
func (m *Model) Free() {
	mlx.Free(m.Params...)
	if m.Quant != nil {
		mlx.Free(m.Quant.Scales...)
		mlx.Free(m.Quant.Biases...)
	}
}

// IsFolder reports whether dir looks like a Hugging Face model folder: it
// holds config.json.
func IsFolder(dir string) bool {
	info, err := os.Stat(filepath.Join(dir, ConfigFile))
	return err == nil && !info.IsDir()
}

// Load reads the Hugging Face folder dir (config.json and
// model.safetensors, or the shards model.safetensors.index.json lists)
// into a model whose compute dtype is dtype ("" for float32). float32,
// float16 and bfloat16 weights are read and cast to the model's parameter
// dtype; the weights of an MLX-quantized folder (ReadQuantization) are
// dequantized (LoadQuantized keeps them quantized).
func Load(dir, dtype string) (*Model, error) {
	var out *Model
	err := mlx.Do(func() error {
		var err error
		out, err = loadFolder(dir, dtype, false)
		return err
	})
	return out, err
}

// loadFolder is Load (keepQuant false) or LoadQuantized on the MLX thread.
func loadFolder(dir, dtype string, keepQuant bool) (*Model, error) {
	cfg, family, err := ReadConfig(dir, dtype)
	if err != nil {
		return nil, err
	}
	quant, err := ReadQuantization(dir)
	if err != nil {
		return nil, err
	}
	m, err := model.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	s := mlx.NewScope()
	defer s.Close()
	t, err := readTensors(dir, quant != nil)
	if err != nil {
		return nil, err
	}
	var groups map[*mlx.Array]quantGroup
	if quant != nil {
		if groups, err = dequantizeTensors(dir, t, *quant); err != nil {
			return nil, err
		}
	}
	named, err := mapTensors(dir, family, m, t, false)
	if err != nil {
		return nil, err
	}
	out := &Model{Family: family, Model: m}
	var kept []*mlx.Array
	if quant != nil && keepQuant {
		if out.Quant = keepQuantized(m, named, groups, *quant); out.Quant != nil {
			kept = append(append(kept, out.Quant.Scales...), out.Quant.Biases...)
		}
	}
	if out.Params, err = castParams(dir, m, named, out.Quant); err != nil {
		return nil, err
	}
	if err := mlx.Eval(kept...); err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	s.Keep(out.Params...)
	s.Keep(kept...)
	return out, nil
}

// assemble maps the tensors of src (a folder, or a GGUF file under
// Hugging Face's names) onto m's parameters in its Specs order, checking
// their shapes, in m's parameter dtype; gains says that norm tensors hold
// the norms' gains where the family stores them otherwise (toParams). It
// runs on the MLX thread.
func assemble(src, family string, m *model.Transformer, t tensors, gains bool) ([]*mlx.Array, error) {
	named, err := mapTensors(src, family, m, t, gains)
	if err != nil {
		return nil, err
	}
	return castParams(src, m, named, nil)
}

// mapTensors maps the tensors of src onto m's parameters in its Specs
// order (toParams), checking their shapes.
func mapTensors(src, family string, m *model.Transformer, t tensors, gains bool) ([]*mlx.Array, error) {
	byName, err := toParams(family, m.Config, t, gains)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", src, err)
	}
	named := make([]*mlx.Array, len(m.Specs))
	for i, spec := range m.Specs {
		a := byName[spec.Name]
		if !slices.Equal(a.Shape(), spec.Shape) {
			return nil, fmt.Errorf("%s: %s maps to %q of shape %v, the config needs %v", src, family, spec.Name, a.Shape(), spec.Shape)
		}
		named[i] = a
	}
	return named, nil
}

// castParams returns the mapped arrays as contiguous arrays of their own
// in m's parameter dtype, evaluated; the packed weights of quant's slots
// (nil for none) are kept as they are.
func castParams(src string, m *model.Transformer, named []*mlx.Array, quant *QuantizedParams) ([]*mlx.Array, error) {
	params := make([]*mlx.Array, len(named))
	for i, a := range named {
		if quant != nil && slices.Contains(quant.Indices, i) {
			params[i] = a
			continue
		}
		// The copy makes transposed and split weights contiguous arrays of
		// their own, so the source's buffers are not held.
		params[i] = mlx.Copy(mlx.AsType(a, m.Config.ParamDtype()))
	}
	if err := mlx.Eval(params...); err != nil {
		return nil, fmt.Errorf("%s: %w", src, err)
	}
	return params, nil
}

// readTensors reads every tensor of dir's weight files, checking that each
// is a float32, float16 or bfloat16 array, or with packed (an MLX-quantized
// folder) a uint32 one, which dequantizeTensors checks.
func readTensors(dir string, packed bool) (tensors, error) {
	files := []string{WeightsFile}
	index := filepath.Join(dir, IndexFile)
	var weightMap map[string]string
	if b, err := os.ReadFile(index); err == nil {
		var idx struct {
			WeightMap map[string]string `json:"weight_map"`
		}
		if err := json.Unmarshal(b, &idx); err != nil {
			return nil, fmt.Errorf("%s: not a valid index: %w", index, err)
		}
		if len(idx.WeightMap) == 0 {
			return nil, fmt.Errorf("%s: weight_map is empty", index)
		}
		weightMap = idx.WeightMap
		files = files[:0]
		for _, f := range idx.WeightMap {
			if f != filepath.Base(f) || !strings.HasSuffix(f, ".safetensors") {
				return nil, fmt.Errorf("%s: weight_map names %q; want a .safetensors file in the folder", index, f)
			}
			if !slices.Contains(files, f) {
				files = append(files, f)
			}
		}
		slices.Sort(files)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("hf: %w", err)
	} else if _, err := os.Stat(filepath.Join(dir, WeightsFile)); err != nil {
		return nil, fmt.Errorf("%s: neither %s nor %s is there: %w", dir, WeightsFile, IndexFile, err)
	}
	t := tensors{}
	for _, f := range files {
		path := filepath.Join(dir, f)
		arrays, _, err := mlx.LoadSafetensors(path)
		if err != nil {
			return nil, fmt.Errorf("hf: %w", err)
		}
		for name, a := range arrays {
			if _, dup := t[name]; dup {
				return nil, fmt.Errorf("%s: tensor %q is in more than one weight file", dir, name)
			}
			if weightMap != nil && weightMap[name] != f {
				return nil, fmt.Errorf("%s: tensor %q is in %s, the index says %q", dir, name, f, weightMap[name])
			}
			if !isFloat(a.Dtype()) && !(packed && a.Dtype() == mlx.Uint32) {
				return nil, fmt.Errorf("%s: tensor %q is %v; want float32, float16 or bfloat16 weights (quantized checkpoints are not supported)", path, name, a.Dtype())
			}
			t[name] = a
		}
	}
	for name, f := range weightMap {
		if _, ok := t[name]; !ok {
			return nil, fmt.Errorf("%s: tensor %q is listed for %s but not in it", index, name, f)
		}
	}
	return t, nil
}
