package mlx_test

import (
	"encoding/binary"
	"encoding/json"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/posttrainllm/posttrainllm/mlx"
)

// ggufFixture writes mlx/testdata/gguf_fixture.py's files once per test
// binary and returns their folder.
var ggufFixture = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "gguf-fixture-")
	if err != nil {
		return "", err
	}
	py, err := filepath.Abs(filepath.Join("..", ".deps", "py", "bin", "python"))
	if err != nil {
		return "", err
	}
	out, err := exec.Command(py, filepath.Join("testdata", "gguf_fixture.py"), dir).CombinedOutput()
	if err != nil {
		return "", &exec.Error{Name: "gguf_fixture.py (run make py-deps for the pinned gguf package): " + string(out), Err: err}
	}
	return dir, nil
})

func fixture(t *testing.T) string {
	t.Helper()
	dir, err := ggufFixture()
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestLoadGGUFMatchesGGUFPackage loads a file that llama.cpp's Python
// package wrote and checks every metadata value and every tensor, the
// quantized ones dequantized, against that package's own values: equal
// float32 numbers.
func TestLoadGGUFMatchesGGUFPackage(t *testing.T) {
	checkGGUFFixture(t, "all.gguf", "expected.json")
}

// TestLoadGGUFBlocksMatchGGUFPackage loads a file of random blocks of
// every quantized type, the ones MLX cannot read exactly among them, which
// LoadGGUF therefore reads and decodes itself: metadata as MLX returns it,
// and every value the same float32 bits as gguf.quants.dequantize's.
func TestLoadGGUFBlocksMatchGGUFPackage(t *testing.T) {
	f := checkGGUFFixture(t, "blocks.gguf", "blocks.json")
	for _, typ := range mlx.GGUFBlockTypes {
		name := "blocks_" + strings.ToLower(typ.String()) + ".weight"
		if tt := f[name]; tt == nil || tt.Raw == nil || tt.Data != nil {
			t.Errorf("%s: %+v, want its raw blocks and no MLX array", name, tt)
		}
	}
}

// checkGGUFFixture checks the fixture file name against the expectations
// in want and returns its tensors (their arrays freed).
func checkGGUFFixture(t *testing.T, name, wantFile string) map[string]*mlx.GGUFTensor {
	dir := fixture(t)
	f, err := mlx.LoadGGUF(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Free()
	raw, err := os.ReadFile(filepath.Join(dir, wantFile))
	if err != nil {
		t.Fatal(err)
	}
	var want struct {
		Metadata map[string]any
		Tensors  map[string]struct {
			Type  string
			Shape []int
		}
	}
	if err := json.Unmarshal(raw, &want); err != nil {
		t.Fatal(err)
	}
	if f.Header.Alignment != 64 || f.Header.Version != 3 {
		t.Errorf("header alignment %d version %d, want 64 and 3", f.Header.Alignment, f.Header.Version)
	}
	dtypes := map[string]mlx.Dtype{"t.u8": mlx.Uint8, "t.i8": mlx.Int8, "t.u16": mlx.Uint16, "t.i16": mlx.Int16,
		"t.u32": mlx.Uint32, "t.i32": mlx.Int32, "t.f32": mlx.Float32, "t.bool": mlx.Bool, "t.u64": mlx.Uint64,
		"t.i64": mlx.Int64, "t.ints": mlx.Int32, "t.floats": mlx.Float32}
	for key, w := range want.Metadata {
		switch w := w.(type) {
		case string:
			if got := f.Header.Strings[key]; got != w {
				t.Errorf("header string %s = %q, want %q", key, got, w)
			}
		case float64:
			if got := f.Header.Numbers[key]; got != w {
				t.Errorf("header number %s = %v, want %v", key, got, w)
			}
		case bool:
			if got := f.Header.Numbers[key]; got != 1 || !w {
				t.Errorf("header number %s = %v, want 1 (%v)", key, got, w)
			}
		}
		got, ok := f.Metadata[key]
		if !ok {
			t.Errorf("metadata %q is missing", key)
			continue
		}
		switch w := w.(type) {
		case string:
			if got.Kind != mlx.GGUFString || got.String != w {
				t.Errorf("%s = %v %q, want the string %q", key, got.Kind, got.String, w)
			}
		case []any:
			if s, ok := w[0].(string); ok {
				want := make([]string, len(w))
				for i := range w {
					want[i] = w[i].(string)
				}
				if got.Kind != mlx.GGUFStrings || !slices.Equal(got.Strings, want) {
					t.Errorf("%s = %v %q, want the strings %q (first %q)", key, got.Kind, got.Strings, want, s)
				}
				continue
			}
			checkNumbers(t, key, got, dtypes[key], false, w)
		default:
			checkNumbers(t, key, got, dtypes[key], true, []any{w})
		}
	}
	for name, w := range want.Tensors {
		tt := f.Tensors[name]
		if tt == nil {
			t.Errorf("tensor %q is missing", name)
			continue
		}
		if tt.Info.Type.String() != w.Type || !slices.Equal(tt.Info.Shape, w.Shape) {
			t.Errorf("%s is %s%v, want %s%v", name, tt.Info.Type, tt.Info.Shape, w.Type, w.Shape)
		}
		if tt.Info.Type == mlx.GGMLBF16 && tt.Data.Dtype() != mlx.BFloat16 {
			t.Errorf("%s: BF16 data is %v, want bfloat16 as the file has it", name, tt.Data.Dtype())
		}
		a, err := tt.Float32()
		if err != nil {
			t.Fatal(err)
		}
		got, err := a.Float32s()
		if err != nil {
			t.Fatal(err)
		}
		a.Free()
		b, err := os.ReadFile(filepath.Join(dir, name+".f32"))
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(b)/4 {
			t.Fatalf("%s: %d values, gguf has %d", name, len(got), len(b)/4)
		}
		for i := range got {
			// Equal as numbers: Q4_0 and Q8_0 as q·scale + bias give +0
			// where llama.cpp's (q−8)·scale gives −0. Raw blocks decode to
			// the same bits.
			w := math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
			if got[i] != w || tt.Raw != nil && math.Float32bits(got[i]) != math.Float32bits(w) {
				t.Errorf("%s[%d] = %g (%#x), gguf.quants gives %g (%#x)", name, i, got[i], math.Float32bits(got[i]), w, math.Float32bits(w))
				break
			}
		}
	}
	return f.Tensors
}

func checkNumbers(t *testing.T, key string, got mlx.GGUFValue, dtype mlx.Dtype, scalar bool, want []any) {
	t.Helper()
	if got.Kind != mlx.GGUFNumbers || got.Dtype != dtype || got.Scalar != scalar || len(got.Floats) != len(want) {
		t.Errorf("%s = %v %v scalar %v %v, want %v numbers %v (scalar %v)", key, got.Kind, got.Dtype, got.Scalar, got.Floats, dtype, want, scalar)
		return
	}
	for i, w := range want {
		var wf float64
		switch w := w.(type) {
		case bool:
			if w {
				wf = 1
			}
		case float64:
			wf = w
		}
		if got.Floats[i] != wf || (!dtype.IsFloat() && got.Ints[i] != int64(wf)) {
			t.Errorf("%s[%d] = %v (ints %v), want %v", key, i, got.Floats[i], got.Ints, wf)
		}
	}
}

// TestLoadGGUFRefusesOtherTypes: an IQ4_NL tensor (an I-quant, whose
// codebook decoding this reader does not implement) is refused by name.
func TestLoadGGUFRefusesOtherTypes(t *testing.T) {
	_, err := mlx.LoadGGUF(filepath.Join(fixture(t), "iq4nl.gguf"))
	if err == nil || !strings.Contains(err.Error(), `tensor "iq4nl.weight" is IQ4_NL`) || !strings.Contains(err.Error(), "Q6_K") {
		t.Fatalf("LoadGGUF of an IQ4_NL tensor: %v, want an error naming IQ4_NL and the readable types", err)
	}
}

// TestLoadGGUFTruncatedAndCorrupt cuts the fixtures at every length of
// their header (every 97th in the tensor data) and damages their bytes: ReadGGUFHeader accepts a prefix only if it still
// holds every tensor's bytes, and LoadGGUF either fails with an error or
// loads a file whose structure is intact; nothing panics or crashes.
func TestLoadGGUFTruncatedAndCorrupt(t *testing.T) {
	// all.gguf is read by MLX, blocks.gguf (K-quants) in Go.
	for _, name := range []string{"all.gguf", "blocks.gguf"} {
		t.Run(name, func(t *testing.T) { truncatedAndCorrupt(t, filepath.Join(fixture(t), name)) })
	}
}

// truncatedAndCorrupt cuts and damages the file src.
func truncatedAndCorrupt(t *testing.T, src string) {
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	h, err := mlx.ReadGGUFHeader(src)
	if err != nil {
		t.Fatal(err)
	}
	var end int64
	for _, ti := range h.Tensors {
		end = max(end, ti.Offset+ti.Size)
	}
	tmp := filepath.Join(t.TempDir(), "cut.gguf")
	for n := 0; n < len(b); n++ {
		if n > int(h.DataOffset) && n%97 != 0 && n != len(b)-1 {
			continue // in the tensor data, every length fails the same size check
		}
		if err := os.WriteFile(tmp, b[:n], 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := mlx.ReadGGUFHeader(tmp)
		if (err == nil) != (int64(n) >= end) {
			t.Fatalf("ReadGGUFHeader of the first %d of %d bytes (tensors end at %d): %v", n, len(b), end, err)
		}
		if n%97 == 0 || n == len(b)-1 {
			if f, err := mlx.LoadGGUF(tmp); err == nil {
				f.Free()
				if int64(n) < end {
					t.Fatalf("LoadGGUF of the first %d bytes succeeded", n)
				}
			} else if strings.Count(err.Error(), "\n") > 0 {
				t.Errorf("LoadGGUF error is not one line: %q", err)
			}
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 300 {
		c := slices.Clone(b)
		for range 1 + i%4 {
			c[rng.IntN(int(h.DataOffset))] = byte(rng.IntN(256))
		}
		if err := os.WriteFile(tmp, c, 0o644); err != nil {
			t.Fatal(err)
		}
		if f, err := mlx.LoadGGUF(tmp); err == nil {
			f.Free()
		}
	}
	garbage := make([]byte, 4096)
	for i := range garbage {
		garbage[i] = byte(rng.IntN(256))
	}
	copy(garbage, "GGUF\x03\x00\x00\x00")
	for _, g := range [][]byte{garbage, garbage[8:], nil, []byte("GGUF")} {
		os.WriteFile(tmp, g, 0o644)
		if _, err := mlx.LoadGGUF(tmp); err == nil {
			t.Errorf("LoadGGUF of %d bytes of garbage succeeded", len(g))
		}
	}
}

// TestLoadGGUFRefusesFloat64Metadata: MLX's reader advances by 4 bytes
// past a float64 value and would read the rest of the file misaligned.
func TestLoadGGUFRefusesFloat64Metadata(t *testing.T) {
	p := filepath.Join(fixture(t), "f64.gguf")
	h, err := mlx.ReadGGUFHeader(p)
	if err != nil || h.Keys["t.f64"] != "float64" {
		t.Fatalf("ReadGGUFHeader: %v, keys %v; want t.f64 of type float64", err, h)
	}
	_, err = mlx.LoadGGUF(p)
	if err == nil || !strings.Contains(err.Error(), `metadata "t.f64" is float64`) {
		t.Fatalf("LoadGGUF of a float64 value: %v, want an error naming it", err)
	}
}
