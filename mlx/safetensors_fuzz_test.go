package mlx

import (
	le "encoding/binary"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// FuzzValidateSafetensors feeds arbitrary bytes to ValidateSafetensors. It
// must never panic, and every file it accepts must load with
// LoadSafetensors into arrays that exactly cover the data section. The seed
// corpus in testdata/fuzz holds a valid file written by SaveSafetensors and
// corrupt variants of it.
func FuzzValidateSafetensors(f *testing.F) {
	onMLX(f, func() { f.Add(validFile(f)) })
	// The target runs off the MLX thread: each call is handed over.
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(t.TempDir(), "f.safetensors")
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := ValidateSafetensors(path); err != nil {
			return
		}
		arrays, _, err := LoadSafetensors(path)
		if err != nil {
			t.Fatalf("ValidateSafetensors accepted a file LoadSafetensors rejects: %v", err)
		}
		total := 0
		for _, a := range arrays {
			total += a.Nbytes()
			a.Free()
		}
		if hdr := 8 + int(le.LittleEndian.Uint64(data)); total != len(data)-hdr {
			t.Fatalf("loaded arrays hold %d bytes, the data section has %d", total, len(data)-hdr)
		}
	})
}

// TestFuzzSeedCorpus checks that the committed seed corpus exercises both
// outcomes: at least one seed validates and loads, and at least one is
// rejected.
func TestFuzzSeedCorpus(t *testing.T) {
	onMLX(t, func() {
		dir := filepath.Join("testdata", "fuzz", "FuzzValidateSafetensors")
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		accepted, rejected := 0, 0
		for _, e := range entries {
			raw, err := os.ReadFile(filepath.Join(dir, e.Name()))
			if err != nil {
				t.Fatal(err)
			}
			data := decodeCorpusEntry(t, e.Name(), string(raw))
			err = ValidateSafetensors(writeTemp(t, "seed.safetensors", data))
			valid := strings.HasPrefix(e.Name(), "valid")
			if valid != (err == nil) {
				t.Fatalf("seed %s: ValidateSafetensors = %v, but the name says valid=%v", e.Name(), err, valid)
			}
			if valid {
				accepted++
			} else {
				rejected++
			}
		}
		if accepted == 0 || rejected == 0 {
			t.Fatalf("seed corpus has %d valid and %d invalid files, want some of each", accepted, rejected)
		}
	})
}

// decodeCorpusEntry parses a one-value "go test fuzz v1" file holding a
// []byte.
func decodeCorpusEntry(t *testing.T, name, s string) []byte {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) != 2 || lines[0] != "go test fuzz v1" ||
		!strings.HasPrefix(lines[1], "[]byte(") || !strings.HasSuffix(lines[1], ")") {
		t.Fatalf("seed %s is not a one-[]byte go test fuzz v1 file", name)
	}
	v, err := strconv.Unquote(strings.TrimSuffix(strings.TrimPrefix(lines[1], "[]byte("), ")"))
	if err != nil {
		t.Fatalf("seed %s: %v", name, err)
	}
	return []byte(v)
}
