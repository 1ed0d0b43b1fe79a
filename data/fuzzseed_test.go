package data

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

var updateFuzzSeeds = flag.Bool("update-fuzz-seeds", false, "rewrite the FuzzReadTokenFile seed corpus in testdata")

// fuzzSeedDir holds the committed seed corpus of FuzzReadTokenFile.
var fuzzSeedDir = filepath.Join("testdata", "fuzz", "FuzzReadTokenFile")

// fuzzSeeds returns the seed files by name: a valid token file and damaged
// copies of it.
func fuzzSeeds(t *testing.T) map[string][]byte {
	valid := validTokenFile(t, TokenFileMeta{"gpt2", 50257, testHash}, []int32{15496, 995, 50256, 13})
	seeds := map[string][]byte{"valid": valid}
	for name, v := range corruptions(valid) {
		seeds[strings.ReplaceAll(name, " ", "_")] = v.data
	}
	return seeds
}

// TestFuzzSeedCorpus checks that the committed seed corpus is in Go's fuzz
// file format and still means what its names say: "valid" reads, every
// other seed is rejected. Run with -update-fuzz-seeds to rewrite it after
// a format change.
func TestFuzzSeedCorpus(t *testing.T) {
	seeds := fuzzSeeds(t)
	if *updateFuzzSeeds {
		if err := os.MkdirAll(fuzzSeedDir, 0o755); err != nil {
			t.Fatal(err)
		}
		for name, data := range seeds {
			text := fmt.Sprintf("go test fuzz v1\n[]byte(%s)\n", strconv.Quote(string(data)))
			if err := os.WriteFile(filepath.Join(fuzzSeedDir, name), []byte(text), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	entries, err := os.ReadDir(fuzzSeedDir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != len(seeds) {
		t.Errorf("%s has %d files, want %d; run go test -run TestFuzzSeedCorpus -update-fuzz-seeds", fuzzSeedDir, len(entries), len(seeds))
	}
	for _, e := range entries {
		text, err := os.ReadFile(filepath.Join(fuzzSeedDir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		header, value, _ := strings.Cut(strings.TrimSuffix(string(text), "\n"), "\n")
		quoted, ok := strings.CutPrefix(value, "[]byte(")
		quoted, ok2 := strings.CutSuffix(quoted, ")")
		data, err := strconv.Unquote(quoted)
		if header != "go test fuzz v1" || !ok || !ok2 || err != nil {
			t.Errorf("%s: not a go test fuzz v1 file holding one []byte", e.Name())
			continue
		}
		path := filepath.Join(t.TempDir(), e.Name())
		if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
		tok, err := ReadTokenFile(path)
		if e.Name() == "valid" {
			if err != nil {
				t.Errorf("valid seed: %v", err)
			} else {
				tok.Close()
			}
		} else if err == nil {
			tok.Close()
			t.Errorf("seed %s reads without error, want it rejected", e.Name())
		}
	}
}
