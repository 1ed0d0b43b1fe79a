package distenv

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestLoopbackRingHostfile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "hosts.json")
	if err := LoopbackRing(path, 3); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var hosts [][]string
	if err := json.Unmarshal(b, &hosts); err != nil {
		t.Fatalf("hostfile %s is not a JSON list of address lists: %v", b, err)
	}
	if len(hosts) != 3 {
		t.Fatalf("hostfile has %d ranks, want 3: %s", len(hosts), b)
	}
	seen := map[string]bool{}
	for r, h := range hosts {
		if len(h) != 1 || seen[h[0]] || len(h[0]) < len("127.0.0.1:1") || h[0][:10] != "127.0.0.1:" {
			t.Fatalf("rank %d's addresses %v, want one distinct 127.0.0.1:PORT", r, h)
		}
		seen[h[0]] = true
	}
}

func TestNCCLEnv(t *testing.T) {
	t.Setenv("CUDA_VISIBLE_DEVICES", "")
	os.Unsetenv("CUDA_VISIBLE_DEVICES")
	t.Setenv("NCCL_NVLS_ENABLE", "")
	os.Unsetenv("NCCL_NVLS_ENABLE")
	got := NCCL(1, 2, "127.0.0.1", 4000)
	want := []string{"MLX_RANK=1", "MLX_WORLD_SIZE=2", "NCCL_HOST_IP=127.0.0.1", "NCCL_PORT=4000", "CUDA_VISIBLE_DEVICES=1", "NCCL_NVLS_ENABLE=0"}
	if !slices.Equal(got, want) {
		t.Fatalf("NCCL(1, 2, ...) = %v, want %v", got, want)
	}
	// A parent limited to GPUs 4 and 6 gives rank 1 GPU 6; a set
	// NCCL_NVLS_ENABLE is the user's to keep.
	t.Setenv("CUDA_VISIBLE_DEVICES", "4,6")
	t.Setenv("NCCL_NVLS_ENABLE", "1")
	got = NCCL(1, 2, "127.0.0.1", 4000)
	if !slices.Contains(got, "CUDA_VISIBLE_DEVICES=6") || slices.Contains(got, "NCCL_NVLS_ENABLE=0") {
		t.Fatalf("NCCL with CUDA_VISIBLE_DEVICES=4,6 and NCCL_NVLS_ENABLE=1 set = %v, want GPU 6 and no NVLS override", got)
	}
}
