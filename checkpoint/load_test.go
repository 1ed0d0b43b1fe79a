package checkpoint

import (
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/posttrainllm/posttrainllm/internal/mlxtest"
	"github.com/posttrainllm/posttrainllm/mlx"
)

// LoadNamed returns a file's arrays in the order asked for, whatever order
// the file keeps them in, and refuses a file whose names or shapes differ
// from what the caller needs, naming the array.
func TestLoadNamedOrderAndChecks(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "a.safetensors")
	mlxtest.Run(t, func(t testing.TB) {
		a, b := mlx.FromSlice([]float32{1, 2, 3}, 3), mlx.FromSlice([]float32{4, 5, 6, 7}, 2, 2)
		defer mlx.Free(a, b)
		if err := WriteArrays(file, []string{"b", "a"}, []*mlx.Array{b, a}, map[string]string{"k": "v"}); err != nil {
			t.Fatal(err)
		}
		if err := WriteArrays(filepath.Join(dir, "dup"), []string{"a", "a"}, []*mlx.Array{a, b}, nil); err == nil ||
			!strings.Contains(err.Error(), `"a"`) {
			t.Errorf("WriteArrays with a name twice: %v, want an error naming it", err)
		}
		if err := WriteArrays(filepath.Join(dir, "short"), []string{"a"}, []*mlx.Array{a, b}, nil); err == nil {
			t.Error("WriteArrays with fewer names than arrays: no error")
		}
	})
	got, err := LoadNamed(file, []string{"a", "b"}, [][]int{{3}, {2, 2}})
	if err != nil {
		t.Fatal(err)
	}
	mlxtest.Run(t, func(t testing.TB) {
		defer mlx.Free(got...)
		for i, want := range [][]float32{{1, 2, 3}, {4, 5, 6, 7}} {
			v, err := got[i].Float32s()
			if err != nil || !slices.Equal(v, want) {
				t.Errorf("array %d = %v, %v; want %v", i, v, err, want)
			}
		}
	})
	for _, c := range []struct {
		names  []string
		shapes [][]int
		want   string
	}{
		{[]string{"a"}, nil, "has 2 arrays, the model needs 1"},
		{[]string{"a", "c"}, nil, `lacks "c"`},
		{[]string{"a", "b"}, [][]int{{3}, {4}}, `"b" has shape [2 2], this model needs [4]`},
	} {
		if _, err := LoadNamed(file, c.names, c.shapes); err == nil || !strings.Contains(err.Error(), c.want) ||
			!strings.Contains(err.Error(), file) {
			t.Errorf("LoadNamed(%v, %v): %v, want an error naming %s and saying %q", c.names, c.shapes, err, file, c.want)
		}
	}
}

// DecodeJSON takes one JSON object with known fields and nothing after it.
func TestDecodeJSONStrict(t *testing.T) {
	type v struct {
		Step int `json:"step"`
	}
	var got v
	if err := DecodeJSON(strings.NewReader(`{"step": 3}`+"\n"), &got); err != nil || got.Step != 3 {
		t.Fatalf("DecodeJSON = %+v, %v; want step 3", got, err)
	}
	for in, want := range map[string]string{
		`{"step": 3, "other": 1}`: "unknown field",
		`{"step": 3} {}`:          "data after the JSON object",
		`{"step": `:               "EOF",
	} {
		if err := DecodeJSON(strings.NewReader(in), &got); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("DecodeJSON(%s): %v, want an error saying %q", in, err, want)
		}
	}
}

// Package checkpoint sits under train: of this project's packages it
// imports only mlx (and what mlx does), never train, the model or the
// command line.
func TestImportsFlowDown(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	const mod = "github.com/posttrainllm/posttrainllm/"
	deps := strings.Fields(string(out))
	if !slices.Contains(deps, mod+"mlx") {
		t.Fatalf("go list -deps of checkpoint lacks the mlx package; the listing is not what the test expects:\n%s", out)
	}
	for _, d := range deps {
		if rest, ok := strings.CutPrefix(d, mod); ok && rest != "checkpoint" && rest != "mlx" && !strings.HasPrefix(rest, "internal/") {
			t.Errorf("checkpoint depends on %s; want only mlx of this module's packages", d)
		}
	}
}
