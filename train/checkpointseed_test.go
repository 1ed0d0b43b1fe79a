package train

import (
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// The committed seed corpus of FuzzReadCheckpointState is in Go's fuzz file
// format and means what its names say: seeds named valid* parse, every
// other seed is rejected with an error.
func TestCheckpointStateSeedCorpus(t *testing.T) {
	dir := filepath.Join("testdata", "fuzz", "FuzzReadCheckpointState")
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	valid, invalid := 0, 0
	for _, e := range entries {
		text, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		header, value, _ := strings.Cut(strings.TrimSuffix(string(text), "\n"), "\n")
		quoted, ok := strings.CutPrefix(value, "[]byte(")
		quoted, ok2 := strings.CutSuffix(quoted, ")")
		b, err := strconv.Unquote(quoted)
		if header != "go test fuzz v1" || !ok || !ok2 || err != nil {
			t.Fatalf("%s: not a go test fuzz v1 file holding one []byte", e.Name())
		}
		_, err = ParseRunState([]byte(b))
		if strings.HasPrefix(e.Name(), "valid") {
			valid++
			if err != nil {
				t.Errorf("seed %s: %v", e.Name(), err)
			}
		} else if invalid++; err == nil {
			t.Errorf("seed %s parses, want it rejected", e.Name())
		}
	}
	if valid == 0 || invalid == 0 {
		t.Fatalf("%s holds %d valid and %d invalid seeds, want both kinds", dir, valid, invalid)
	}
}

// Sizes that would wrap around in MLX's 32-bit shapes are refused by
// Validate, and sizes whose parameters or batch cannot fit in memory by
// CheckMemory, before MLX allocates anything.
func TestAbsurdSizesRefused(t *testing.T) {
	huge := func(f func(*Config)) Config {
		c := tinyConfig().WithDefaults()
		f(&c)
		return c
	}
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{huge(func(c *Config) { c.Model.VocabSize = 1 << 40 }), "vocab_size = 1099511627776, want <= 2147483647"},
		{huge(func(c *Config) { c.Model.Context = math.MaxInt }), "context = 9223372036854775807, want <= 2147483647"},
		{huge(func(c *Config) { c.Batch = 1 << 31 }), "batch = 2147483648, want <= 2147483647"},
	} {
		if err := c.cfg.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Validate() = %v, want %q", err, c.want)
		}
	}
	if physicalMemory() == 0 {
		t.Fatal("physicalMemory() = 0 on this platform; CheckMemory cannot guard it")
	}
	for _, cfg := range []Config{
		huge(func(c *Config) { c.Model.VocabSize, c.Model.DModel = 2_000_000_000, 1024 }),
		huge(func(c *Config) { c.Model.DModel, c.Model.Heads = 1<<20, 2 }),
		huge(func(c *Config) { c.Model.Layers = 1 << 30 }),
		huge(func(c *Config) { c.Batch, c.Model.Context = 1<<30, 1<<20 }),
	} {
		if err := cfg.Validate(); err != nil {
			t.Fatalf("Validate() = %v, want these sizes valid in themselves", err)
		}
		if err := cfg.CheckMemory(); err == nil || !strings.Contains(err.Error(), "more than the") {
			t.Errorf("CheckMemory(%+v) = %v, want it refused", cfg.Model, err)
		}
		if _, _, err := Prepare(cfg); err == nil {
			t.Errorf("Prepare accepted a run needing %.3g bytes", cfg.MinMemory().Total())
		}
	}
	if err := tinyConfig().WithDefaults().CheckMemory(); err != nil {
		t.Fatalf("tiny config refused: %v", err)
	}
}
