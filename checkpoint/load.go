package checkpoint

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"

	"github.com/posttrainllm/posttrainllm/mlx"
)

// Ordered picks the arrays of m (read from what, named in errors) by name
// in the order of names, checking that m holds exactly those and, unless
// shapes is nil, that each has shapes[i]. The arrays stay m's: nothing is
// copied or freed.
func Ordered(what string, m map[string]*mlx.Array, names []string, shapes [][]int) ([]*mlx.Array, error) {
	if len(m) != len(names) {
		return nil, fmt.Errorf("%s has %d arrays, the model needs %d", what, len(m), len(names))
	}
	out := make([]*mlx.Array, len(names))
	for i, n := range names {
		a, ok := m[n]
		if !ok {
			return nil, fmt.Errorf("%s lacks %q", what, n)
		}
		if shapes != nil && !slices.Equal(a.Shape(), shapes[i]) {
			return nil, fmt.Errorf("%s: %q has shape %v, this model needs %v", what, n, a.Shape(), shapes[i])
		}
		out[i] = a
	}
	return out, nil
}

// LoadNamed loads the arrays of the safetensors file in the order of
// names, checking their shapes (Ordered). The caller frees them.
func LoadNamed(file string, names []string, shapes [][]int) ([]*mlx.Array, error) {
	var out []*mlx.Array
	err := mlx.Do(func() error {
		arrays, _, err := mlx.LoadSafetensors(file)
		if err != nil {
			return err
		}
		if out, err = Ordered(file, arrays, names, shapes); err != nil {
			mlx.Free(slices.Collect(maps.Values(arrays))...)
		}
		return err
	})
	return out, err
}

// DecodeJSON decodes exactly one JSON value from r into v, refusing
// fields v does not have and anything after the value: a checkpoint's
// JSON files are written by this program, so anything else is damage or
// another version's layout. The error does not name the file.
func DecodeJSON(r io.Reader, v any) error {
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("data after the JSON object")
	}
	return nil
}
