package mlx

import (
	le "encoding/binary"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// stBytes assembles a safetensors file: the 8-byte little-endian header
// length, the header, then the data section.
func stBytes(header string, data []byte) []byte {
	out := le.LittleEndian.AppendUint64(nil, uint64(len(header)))
	out = append(out, header...)
	return append(out, data...)
}

// writeTemp writes data to a new file in a test temporary directory.
func writeTemp(t testing.TB, name string, data []byte) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// testTensors returns a small set of arrays of several dtypes, named as a
// model checkpoint names its parameters.
func testTensors() map[string]*Array {
	return map[string]*Array{
		"tok_embeddings.weight":   f32([]float64{0.5, -1, 2, 3.25, -4, 5, 6, 7, 8, 9, 10, 11}, 4, 3),
		"blocks.0.attn.wq.weight": AsType(f32([]float64{1, -2, 0.375, 4}, 2, 2), BFloat16),
		"step":                    FromSlice([]int32{42}),
		"mask":                    FromSlice([]bool{true, false, true}),
		"counts":                  FromSlice([]int64{1 << 40, -7}),
	}
}

func TestSafetensorsRoundTrip(t *testing.T) {
	onMLX(t, func() {
		dir := t.TempDir()
		// No .safetensors suffix: the file is written at exactly this path.
		path := filepath.Join(dir, "model.ckpt")
		arrays := testTensors()
		meta := map[string]string{"format": "mlx", "config": `{"dim":8,"n_layers":1}`, "empty": ""}
		if err := SaveSafetensors(path, arrays, meta); err != nil {
			t.Fatal(err)
		}
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		if len(entries) != 1 || entries[0].Name() != "model.ckpt" {
			t.Fatalf("save wrote %v, want exactly model.ckpt", entries)
		}
		if err := ValidateSafetensors(path); err != nil {
			t.Fatalf("a file SaveSafetensors wrote does not validate: %v", err)
		}
		loaded, gotMeta, err := LoadSafetensors(path)
		if err != nil {
			t.Fatal(err)
		}
		// Loaded arrays are evaluated: they outlive the file.
		if err := os.Remove(path); err != nil {
			t.Fatal(err)
		}
		if len(loaded) != len(arrays) {
			t.Fatalf("loaded %d arrays, saved %d", len(loaded), len(arrays))
		}
		for name, want := range arrays {
			got, ok := loaded[name]
			if !ok {
				t.Fatalf("array %q missing after load", name)
			}
			if got.Dtype() != want.Dtype() || shapeString(got.Shape()) != shapeString(want.Shape()) {
				t.Fatalf("%s: loaded %v, saved %v", name, got, want)
			}
			gb, err := got.Bytes()
			if err != nil {
				t.Fatal(err)
			}
			wb, err := want.Bytes()
			if err != nil {
				t.Fatal(err)
			}
			if string(gb) != string(wb) {
				t.Fatalf("%s: bytes differ after a round trip", name)
			}
		}
		if len(gotMeta) != len(meta) {
			t.Fatalf("metadata %v, want %v", gotMeta, meta)
		}
		for k, v := range meta {
			if gotMeta[k] != v {
				t.Fatalf("metadata %q = %q, want %q", k, gotMeta[k], v)
			}
		}
	})
}

func TestSafetensorsSaveErrors(t *testing.T) {
	onMLX(t, func() {
		missing := filepath.Join(t.TempDir(), "no-such-dir", "x.safetensors")
		if err := SaveSafetensors(missing, testTensors(), nil); err == nil {
			t.Fatal("save into a missing directory succeeded")
		}
		bad := map[string]*Array{"w": Matmul(Ones([]int{2, 3}, Float32), Ones([]int{2, 3}, Float32))}
		if err := SaveSafetensors(filepath.Join(t.TempDir(), "x.safetensors"), bad, nil); err == nil ||
			!strings.Contains(err.Error(), "matmul") {
			t.Fatalf("save of an array carrying an error gave %v", err)
		}
		if _, _, err := LoadSafetensors(filepath.Join(t.TempDir(), "absent.safetensors")); err == nil {
			t.Fatal("load of a missing file succeeded")
		}
	})
}

// validFile writes testTensors with SaveSafetensors and returns the bytes.
func validFile(t testing.TB) []byte {
	t.Helper()
	path := filepath.Join(t.TempDir(), "valid.safetensors")
	if err := SaveSafetensors(path, testTensors(), map[string]string{"k": "v"}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestSafetensorsTruncated(t *testing.T) {
	onMLX(t, func() {
		full := validFile(t)
		hdr := int(le.LittleEndian.Uint64(full))
		for _, n := range []int{0, 5, 8, 8 + hdr/2, 8 + hdr, len(full) - 1} {
			path := writeTemp(t, "cut.safetensors", full[:n])
			if err := ValidateSafetensors(path); err == nil {
				t.Fatalf("a file cut to %d of %d bytes validates", n, len(full))
			}
			if _, _, err := LoadSafetensors(path); err == nil {
				t.Fatalf("a file cut to %d of %d bytes loads", n, len(full))
			}
		}
		// Trailing bytes beyond the last tensor are rejected too.
		path := writeTemp(t, "long.safetensors", append(full, 0))
		if err := ValidateSafetensors(path); err == nil {
			t.Fatal("a file with a trailing byte validates")
		}
	})
}

func TestSafetensorsCorruptHeader(t *testing.T) {
	onMLX(t, func() {
		four := []byte{0, 0, 128, 63}
		cases := map[string][]byte{
			"huge header length":  append(le.LittleEndian.AppendUint64(nil, 1<<62), "{}"...),
			"header past the end": append(le.LittleEndian.AppendUint64(nil, 100), `{"a":1}`...),
			"not json":            stBytes(`{"a":`, four),
			"json array":          stBytes(`[1,2]`, nil),
			"json null":           stBytes(`null`, nil),
			"tensor not object":   stBytes(`{"a":5}`, four),
			"unknown dtype":       stBytes(`{"a":{"dtype":"F8","shape":[1],"data_offsets":[0,4]}}`, four),
			"missing offsets":     stBytes(`{"a":{"dtype":"F32","shape":[1]}}`, four),
			"missing shape":       stBytes(`{"a":{"dtype":"F32","data_offsets":[0,4]}}`, four),
			"three offsets":       stBytes(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4,4]}}`, four),
			"negative dim":        stBytes(`{"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}}`, four),
			"shape vs bytes":      stBytes(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}}`, four),
			"bad metadata":        stBytes(`{"__metadata__":{"k":1},"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}`, four),
			"invalid utf-8":       stBytes("{\"a\xff\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", four),
			"lone surrogate":      stBytes(`{"a\ud800":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}`, four),
			"lone low surrogate":  stBytes(`{"a\udc00b":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}`, four),
			"capitalised key":     stBytes(`{"a":{"dtype":"F32","Shape":[1],"data_offsets":[0,4]}}`, four),
			"null shape":          stBytes(`{"a":{"dtype":"F32","shape":null,"data_offsets":[0,4]}}`, four),
			"dim over int32":      stBytes(`{"a":{"dtype":"F32","shape":[3000000000,0],"data_offsets":[0,0]}}`, nil),
			"NUL in name":         stBytes(`{"a\u0000b":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}`, four),
			"NUL in metadata":     stBytes(`{"__metadata__":{"k":"v\u0000"}}`, nil),
			"empty header":        stBytes(``, nil),
		}
		for name, data := range cases {
			path := writeTemp(t, "bad.safetensors", data)
			if err := ValidateSafetensors(path); err == nil {
				t.Fatalf("%s: corrupt file validates", name)
			}
			if _, _, err := LoadSafetensors(path); err == nil {
				t.Fatalf("%s: corrupt file loads", name)
			}
		}
		// The controls: the same layouts written correctly load.
		good := stBytes(`{"__metadata__":{"k":"v"},"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}`, four)
		arrays, meta, err := LoadSafetensors(writeTemp(t, "good.safetensors", good))
		if err != nil {
			t.Fatal(err)
		}
		if meta["k"] != "v" {
			t.Fatalf("metadata %v", meta)
		}
		checkClose(t, "hand-written tensor", arrays["a"], []int{1}, []float64{1}, 0)
		// A surrogate pair, an escaped backslash before a 'u', extra keys and
		// padding spaces (as Python's safetensors writes) are all fine.
		escaped := stBytes(`{"\ud83d\ude00\\u":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"extra":1}}   `, four)
		arrays, _, err = LoadSafetensors(writeTemp(t, "escaped.safetensors", escaped))
		if err != nil {
			t.Fatal(err)
		}
		checkClose(t, "escaped name", arrays["\U0001F600\\u"], []int{1}, []float64{1}, 0)
	})
}

func TestValidateSafetensorsOffsets(t *testing.T) {
	entry := func(b, e int) map[string]any {
		return map[string]any{"dtype": "F32", "shape": []int{(e - b) / 4}, "data_offsets": []int{b, e}}
	}
	file := func(t *testing.T, tensors map[string]any, data int) string {
		h, err := json.Marshal(tensors)
		if err != nil {
			t.Fatal(err)
		}
		return writeTemp(t, "x.safetensors", stBytes(string(h), make([]byte, data)))
	}
	cases := []struct {
		name    string
		tensors map[string]any
		data    int
		ok      bool
	}{
		{"tiled", map[string]any{"a": entry(0, 8), "b": entry(8, 16)}, 16, true},
		{"tiled out of order", map[string]any{"a": entry(8, 16), "b": entry(0, 8)}, 16, true},
		{"overlap", map[string]any{"a": entry(0, 8), "b": entry(4, 12)}, 12, false},
		{"same range twice", map[string]any{"a": entry(0, 8), "b": entry(0, 8)}, 8, false},
		{"past the end", map[string]any{"a": entry(0, 8), "b": entry(8, 16)}, 12, false},
		{"gap", map[string]any{"a": entry(0, 4), "b": entry(8, 12)}, 12, false},
		{"uncovered tail", map[string]any{"a": entry(0, 8)}, 12, false},
		{"reversed range", map[string]any{"a": map[string]any{"dtype": "F32", "shape": []int{0}, "data_offsets": []int{8, 4}}}, 8, false},
		{"negative offset", map[string]any{"a": map[string]any{"dtype": "F32", "shape": []int{1}, "data_offsets": []int{-4, 0}}}, 4, false},
		{"huge dims", map[string]any{"a": map[string]any{"dtype": "F32", "shape": []int64{1 << 40, 1 << 40}, "data_offsets": []int{0, 4}}}, 4, false},
		{"empty tensor", map[string]any{"a": entry(0, 4), "z": map[string]any{"dtype": "F32", "shape": []int{0, 3}, "data_offsets": []int{4, 4}}}, 4, true},
	}
	for _, c := range cases {
		err := ValidateSafetensors(file(t, c.tensors, c.data))
		if c.ok && err != nil {
			t.Fatalf("%s: rejected a well-formed file: %v", c.name, err)
		}
		if !c.ok && err == nil {
			t.Fatalf("%s: accepted a malformed file", c.name)
		}
	}
}
