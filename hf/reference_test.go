package hf

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"

	"github.com/posttrainllm/posttrainllm/internal/pyenv"
	"github.com/posttrainllm/posttrainllm/mlx"
)

// python is the interpreter of the project-local environment that holds
// the pinned numpy, safetensors and tokenizers (make py-deps).
func python(t testing.TB) string {
	t.Helper()
	return pyenv.Reference(t)
}

// runReference runs hf/testdata/reference.py with args.
func runReference(t testing.TB, args ...string) {
	t.Helper()
	pyenv.Run(t, python(t), filepath.Join("testdata", "reference.py"), args...)
}

// referenceLogits returns the numpy reference's float32 logits [T·V] of the
// folder dir on tokens.
func referenceLogits(t testing.TB, dir string, tokens []int32) []float32 {
	t.Helper()
	return pyenv.Logits(t, runReference, dir, tokens)
}

// modelLogits runs an imported model on tokens (batch 1) and returns its
// float32 logits [T·V].
func modelLogits(t testing.TB, m *Model, tokens []int32) []float32 {
	t.Helper()
	var out []float32
	mlx.Run(func() []*mlx.Array {
		logits := m.Model.Logits(m.Params, mlx.FromSlice(tokens, 1, len(tokens)))
		f, err := mlx.AsType(logits, mlx.Float32).Float32s()
		if err != nil {
			t.Fatal(err)
		}
		out = f
		return nil
	})
	return out
}

// closeLogits fails unless got and want agree to float32 tolerance,
// relative to the logits' scale.
func closeLogits(t testing.TB, what string, got, want []float32) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d logits, the reference has %d", what, len(got), len(want))
	}
	scale, worst := 0.0, 0.0
	for i := range want {
		scale = math.Max(scale, math.Abs(float64(want[i])))
		worst = math.Max(worst, math.Abs(float64(got[i]-want[i])))
	}
	if scale == 0 {
		t.Fatalf("%s: the reference logits are all zero", what)
	}
	if worst > 1e-4*scale {
		t.Fatalf("%s: logits differ from the numpy reference by %g (scale %g)", what, worst, scale)
	}
	t.Logf("%s: max |Δlogit| %.3g at scale %.3g", what, worst, scale)
}

// sameTensors fails unless the folder got holds the tensors of the folder
// want under the same names, with want's values (cast to got's dtype):
// an export writes back the layout it imported, fused tensors included.
func sameTensors(t *testing.T, got, want string) {
	t.Helper()
	mlx.Run(func() []*mlx.Array {
		g, err := readTensors(got, false)
		if err != nil {
			t.Fatal(err)
		}
		w, err := readTensors(want, false)
		if err != nil {
			t.Fatal(err)
		}
		for name := range w {
			if _, ok := g[name]; !ok {
				t.Errorf("the export lacks tensor %q", name)
			}
		}
		for name, a := range g {
			b, ok := w[name]
			if !ok {
				t.Errorf("the export has tensor %q, the imported folder none", name)
				continue
			}
			sameBits(t, name, a, mlx.AsType(b, a.Dtype()))
		}
		return nil
	})
}

// sameBits fails unless got has want's shape, dtype and bytes.
func sameBits(t testing.TB, what string, got, want *mlx.Array) {
	t.Helper()
	if !slices.Equal(got.Shape(), want.Shape()) || got.Dtype() != want.Dtype() {
		t.Fatalf("%s: %v %v, want %v %v", what, got.Shape(), got.Dtype(), want.Shape(), want.Dtype())
	}
	g, err := got.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	w, err := want.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(g, w) {
		t.Fatalf("%s %v: the bytes differ", what, want.Shape())
	}
}

// The numpy forward of each family, run on random-weight Hugging Face
// folders that Python writes (every dtype, one file and shards), gives the
// logits posttrainllm computes after import; exporting the model and
// importing the export gives the same logits again, and so does the
// reference on the exported folder.
func TestImportMatchesReference(t *testing.T) {
	cases := []struct {
		family, dtype string
		shards        int
		extra         []string
	}{
		{"gpt2", "float32", 1, nil},
		{"gpt2", "bfloat16", 3, nil},
		{"gpt2", "float16", 1, nil},
		{"llama", "float32", 1, nil},
		{"llama", "bfloat16", 2, []string{"--tied"}},
		{"llama", "float16", 1, []string{"--rope-scaling", "2"}},
	}
	tokens := []int32{3, 17, 0, 42, 42, 9, 88, 1, 64, 5, 23}
	for i, c := range cases {
		name := fmt.Sprintf("%s-%s-%dshards%v", c.family, c.dtype, c.shards, c.extra)
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "hf")
			runReference(t, append([]string{"make", dir, "--family", c.family, "--dtype", c.dtype,
				"--shards", strconv.Itoa(c.shards), "--seed", strconv.Itoa(i)}, c.extra...)...)
			checkAgainstReference(t, dir, c.family, tokens)
		})
	}
}

// checkAgainstReference imports the folder dir, checks its family and its
// logits on tokens against the numpy reference, exports it, checks the
// reference on the export and the export's config.json's model_type, and
// imports the export: every parameter bit for bit, and the same logits.
func checkAgainstReference(t *testing.T, dir, family string, tokens []int32) {
	t.Helper()
	m, err := Load(dir, "")
	if err != nil {
		t.Fatal(err)
	}
	defer m.Free()
	if m.Family != family {
		t.Fatalf("family %q, want %q", m.Family, family)
	}
	want := referenceLogits(t, dir, tokens)
	got := modelLogits(t, m, tokens)
	closeLogits(t, "import", got, want)

	out := filepath.Join(t.TempDir(), "export")
	if f, err := Save(out, m.Model, m.Params); err != nil || f != family {
		t.Fatalf("export: family %q, %v; want %q", f, err, family)
	}
	b, err := os.ReadFile(filepath.Join(out, ConfigFile))
	if err != nil {
		t.Fatal(err)
	}
	var exported struct {
		ModelType     string   `json:"model_type"`
		Architectures []string `json:"architectures"`
	}
	if err := json.Unmarshal(b, &exported); err != nil || exported.ModelType != family || len(exported.Architectures) != 1 {
		t.Fatalf("exported config.json: model_type %q, architectures %v (%v); want %q", exported.ModelType, exported.Architectures, err, family)
	}
	closeLogits(t, "reference on the export", got, referenceLogits(t, out, tokens))
	sameTensors(t, out, dir)
	back, err := Load(out, "")
	if err != nil {
		t.Fatal(err)
	}
	defer back.Free()
	if back.Model.Config != m.Model.Config {
		t.Fatalf("config after export and import %+v, before %+v", back.Model.Config, m.Model.Config)
	}
	// The round trip keeps every parameter bit for bit; the logits
	// agree to float tolerance only, since an import may hold a
	// weight as a transposed view where the export's reload holds it
	// contiguous, and BLAS sums the two layouts in different orders.
	if len(back.Params) != len(m.Params) {
		t.Fatalf("%d parameters after export and import, %d before", len(back.Params), len(m.Params))
	}
	for j, p := range m.Params {
		sameBits(t, m.Model.Specs[j].Name, back.Params[j], p)
	}
	closeLogits(t, "export and import", modelLogits(t, back, tokens), got)
}
