package mlx_test

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/posttrainllm/posttrainllm/internal/pyenv"
	"github.com/posttrainllm/posttrainllm/internal/realmodel"
	"github.com/posttrainllm/posttrainllm/mlx"
)

// TestGemmaGGUFMatchesGGUFPackage decodes every tensor of the published
// Gemma-3-270M Q4_K_M file (F32, Q5_0, Q8_0, Q4_K and Q6_K) and compares
// the SHA-256 of its float32 values with that of gguf.quants.dequantize's:
// the same bits, tensor by tensor (the first 4,096 rows of each).
func TestGemmaGGUFMatchesGGUFPackage(t *testing.T) {
	const maxRows = 4096
	path := realmodel.GemmaGGUF(t)
	out := pyenv.Run(t, pyenv.Reference(t), "testdata/gguf_digests.py", path, fmt.Sprint(maxRows))
	want := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		want[f[0]] = f[1] + " " + f[2]
	}
	f, err := mlx.LoadGGUF(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Free()
	if len(want) != len(f.Tensors) || len(want) != 236 {
		t.Fatalf("gguf lists %d tensors, LoadGGUF %d; want 236", len(want), len(f.Tensors))
	}
	types := map[string]int{}
	for name, tt := range f.Tensors {
		var vals []float32
		if tt.Raw != nil {
			info := tt.Info
			rowBytes := rowSize(tt)
			rows := min(maxRows, len(tt.Raw)/rowBytes)
			if vals, err = mlx.GGMLDequantize(info.Type, tt.Raw[:rows*rowBytes]); err != nil {
				t.Fatal(err)
			}
		} else if vals, err = tt.Data.Float32s(); err != nil {
			t.Fatal(err)
		}
		h := sha256.New()
		b := make([]byte, 4)
		for _, v := range vals {
			binary.LittleEndian.PutUint32(b, math.Float32bits(v))
			h.Write(b)
		}
		got := tt.Info.Type.String() + " " + hex.EncodeToString(h.Sum(nil))
		if got != want[name] {
			t.Errorf("%s: %s, gguf.quants gives %s", name, got, want[name])
		}
		types[tt.Info.Type.String()]++
	}
	t.Logf("tensors by type: %v", types)
}

// rowSize is the number of bytes of one row (last axis) of a raw tensor.
func rowSize(tt *mlx.GGUFTensor) int {
	rows := 1
	for _, d := range tt.Info.Shape[:len(tt.Info.Shape)-1] {
		rows *= d
	}
	return int(tt.Info.Size) / rows
}
