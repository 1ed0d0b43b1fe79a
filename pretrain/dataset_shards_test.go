package pretrain

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/posttrainllm/posttrainllm/data"
	"github.com/posttrainllm/posttrainllm/internal/runtest"
)

// writeByteShards writes shards named NAME.bin of the given lengths whose
// ids (byte tokenizer) record the shard: shard k holds id k+1 throughout.
func writeByteShards(t *testing.T, dir string, lengths map[string]int) {
	t.Helper()
	k := 0
	for name, n := range lengths {
		ids := make([]int32, n)
		for i := range ids {
			ids[i] = int32(k + 1)
		}
		k++
		if err := data.WriteShard(filepath.Join(dir, name+".bin"), 256, ids); err != nil {
			t.Fatal(err)
		}
	}
}

func TestOpenShardDatasetHoldsOut(t *testing.T) {
	dir := t.TempDir()
	writeByteShards(t, dir, map[string]int{"c_train_000000": 100, "c_train_000001": 50, "c_train_000002": 30, "c_val_000000": 40})
	for _, tc := range []struct {
		pattern, val string
		train, held  int
		separateHeld bool
	}{
		// Explicit held-out shards; those the pattern also matches leave training.
		{filepath.Join(dir, "c_train_*.bin"), filepath.Join(dir, "c_val_*.bin"), 180, 40, true},
		{dir, filepath.Join(dir, "c_val_*.bin"), 180, 40, true},
		// Without one, the last shard of the pattern is held out.
		{filepath.Join(dir, "c_train_*.bin"), "", 150, 30, true},
		// One shard alone is split by val_fraction (0.1 of 100).
		{filepath.Join(dir, "c_train_000000.bin"), "", 90, 10, false},
	} {
		ds, err := OpenShardDataset(tc.pattern, tc.val, "byte", 8, 0.1)
		if err != nil {
			t.Fatalf("OpenShardDataset(%q, %q): %v", tc.pattern, tc.val, err)
		}
		if ds.Train.Len() != tc.train || ds.Val.Len() != tc.held || (ds.ValTokens != nil) != tc.separateHeld {
			t.Errorf("OpenShardDataset(%q, %q): train %d held-out %d (separate %v), want %d and %d (separate %v)",
				tc.pattern, tc.val, ds.Train.Len(), ds.Val.Len(), ds.ValTokens != nil, tc.train, tc.held, tc.separateHeld)
		}
		if err := ds.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

func TestOpenShardDatasetRejects(t *testing.T) {
	dir := t.TempDir()
	writeByteShards(t, dir, map[string]int{"a": 100, "b": 5})
	if err := data.WriteShard(filepath.Join(dir, "big.bin"), 1000, []int32{999}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		pattern, val, tokenizer string
		want                    string
	}{
		{filepath.Join(dir, "a.bin"), filepath.Join(dir, "b.bin"), "byte", "held-out shards"},
		{filepath.Join(dir, "a.bin"), filepath.Join(dir, "a.bin"), "byte", "every shard is also held out"},
		{filepath.Join(dir, "none*.bin"), "", "byte", "no files match"},
		{filepath.Join(dir, "a.bin"), filepath.Join(dir, "big.bin"), "byte", "token 999 at index 0 is outside the vocabulary [0,256)"},
		{filepath.Join(dir, "a.bin"), "", "nope", "unknown tokenizer"},
	} {
		ds, err := OpenShardDataset(tc.pattern, tc.val, tc.tokenizer, 8, 0.1)
		if err == nil {
			ds.Close()
			t.Errorf("OpenShardDataset(%q, %q, %q) succeeded, want an error containing %q", tc.pattern, tc.val, tc.tokenizer, tc.want)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("OpenShardDataset(%q, %q, %q) = %v, want an error containing %q", tc.pattern, tc.val, tc.tokenizer, err, tc.want)
		}
	}
}

func TestConfigValidatesDataSources(t *testing.T) {
	base := runtest.TinyConfig().WithDefaults()
	for _, tc := range []struct {
		corpus, data, val string
		want              string
	}{
		{"x.txt", "d/*.bin", "", "want one source of training text"},
		{"", "", "d/val.bin", "val_data"},
		{"", "", "", "bpe_dropout = 0.1 with tokenizer \"byte\""},
		{"", "", "", "bpe_dropout = 1, want a probability in [0, 1)"},
	} {
		c := base
		c.Corpus, c.Data, c.ValData = tc.corpus, tc.data, tc.val
		if strings.HasPrefix(tc.want, "bpe_dropout = 0.1") {
			c.BPEDropout = 0.1
		} else if strings.HasPrefix(tc.want, "bpe_dropout = 1") {
			c.BPEDropout = 1
		}
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Validate with corpus %q data %q val_data %q = %v, want an error containing %q", tc.corpus, tc.data, tc.val, err, tc.want)
		}
	}
	c := base
	c.Data, c.ValData = "d/*_train_*.bin", "d/*_val_*.bin"
	if err := c.Validate(); err != nil {
		t.Errorf("Validate with data and val_data: %v", err)
	}
}
