package runfolder

import (
	"path/filepath"
	"slices"
	"testing"

	"github.com/posttrainllm/posttrainllm/finetune"
	"github.com/posttrainllm/posttrainllm/generate"
	"github.com/posttrainllm/posttrainllm/internal/mlxtest"
	"github.com/posttrainllm/posttrainllm/internal/runtest"
	"github.com/posttrainllm/posttrainllm/mlx"
)

// The checkpoint fuse writes computes exactly the logits of base +
// adapters, and greedy generation from either gives the same text, for
// LoRA and DoRA.
func TestFusedCheckpointMatchesBasePlusAdapters(t *testing.T) {
	base := runtest.WriteBase(t)
	trainFile := runtest.WriteCompletions(t, "train.jsonl", 0, 20)
	for _, method := range []string{finetune.MethodLoRA, finetune.MethodDoRA} {
		ft := finetune.Config{Base: base, Method: method, Rank: 2, Alpha: 16, Targets: []string{"all"}, Train: trainFile, MaskPrompt: true}
		cfg := runtest.FineTuneConfig(3)
		cfg.EvalEvery = 0
		sum := runFineTune(t, cfg, ft, filepath.Join(t.TempDir(), method), "")
		fusedDir, err := Fuse(sum.LastCheckpoint, "", filepath.Join(t.TempDir(), "fused"), FuseOptions{})
		if err != nil {
			t.Fatal(err)
		}
		mlxtest.Run(t, func(t testing.TB) {
			a, err := loadAdapted(sum.LastCheckpoint, "")
			if err != nil {
				t.Fatal(err)
			}
			defer a.Free()
			_, m, fused, free, err := loadModel(fusedDir)
			if err != nil {
				t.Fatal(err)
			}
			defer free()
			x := mlx.FromSlice([]int32{116, 104, 101, 32, 113, 117, 105, 99}, 1, 8) // "the quic"
			logits := func(p []*mlx.Array) []float32 {
				v, err := mlx.AsType(m.Logits(p, x), mlx.Float32).Float32s()
				if err != nil {
					t.Fatal(err)
				}
				return v
			}
			adapted, plain, orig := logits(a.Params), logits(fused), logits(a.Base)
			if slices.Equal(adapted, orig) {
				t.Fatalf("%s: the adapters do not change the logits; the comparison would prove nothing", method)
			}
			if !slices.Equal(adapted, plain) {
				t.Errorf("%s: the fused checkpoint's logits differ from base + adapters", method)
			}
		})
		opts := SampleOptions{Options: generate.Options{Sampling: generate.Sampling{MaxTokens: 12}}}
		want, err := SampleAdapted(sum.LastCheckpoint, "", "the ", "cpu", opts)
		if err != nil {
			t.Fatal(err)
		}
		got, err := SampleCheckpoint(fusedDir, "the ", "cpu", opts)
		if err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf("%s: greedy text %q from the fused checkpoint, %q from base + adapters", method, got, want)
		}
	}
}
