package runfolder

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/posttrainllm/posttrainllm/checkpoint"
	"github.com/posttrainllm/posttrainllm/finetune"
	"github.com/posttrainllm/posttrainllm/generate"
	"github.com/posttrainllm/posttrainllm/internal/mlxtest"
	"github.com/posttrainllm/posttrainllm/internal/runtest"
	"github.com/posttrainllm/posttrainllm/mlx"
	"github.com/posttrainllm/posttrainllm/model"
	"github.com/posttrainllm/posttrainllm/peft"
	"github.com/posttrainllm/posttrainllm/train"
)

// writeQuantizedBase saves runtest.WriteBase's model with its block
// projections quantized (4-bit, groups of 32) as a step-0 checkpoint, the
// layout an MLX-quantized import or fuse --quantize writes.
func writeQuantizedBase(t testing.TB) string {
	t.Helper()
	float := runtest.WriteBase(t)
	var dir string
	mlxtest.Run(t, func(t testing.TB) {
		_, m, params, free, err := loadModel(float)
		if err != nil {
			t.Fatal(err)
		}
		defer free()
		q, frozen, err := peft.QuantizeBase(m.Specs, params, 32, 4)
		if err != nil {
			t.Fatal(err)
		}
		defer freeAt(frozen, q.Indices)
		defer mlx.Free(frozen[len(q.Base):]...)
		st, err := train.ReadRunState(filepath.Join(float, checkpoint.StateFile))
		if err != nil {
			t.Fatal(err)
		}
		if dir, err = train.SaveCheckpoint(checkpoint.Root(filepath.Join(t.TempDir(), "qbase")), train.RunState{Config: st.Config}, q.Names(), frozen, nil, nil); err != nil {
			t.Fatal(err)
		}
	})
	return dir
}

// A quantized base checkpoint trains adapters over its quantized matmuls;
// a full fine-tune, --quantize over it and a whole-model load for
// training refuse it by name; sampling dequantizes it.
func TestQuantizedBaseCheckpoint(t *testing.T) {
	base := writeQuantizedBase(t)
	if q, err := CheckpointQuantization(base); err != nil || q != "4-bit, groups of 32" {
		t.Fatalf("CheckpointQuantization: %q, %v; want 4-bit, groups of 32", q, err)
	}
	trainFile := runtest.WriteCompletions(t, "train.jsonl", 0, 16)
	cfg := runtest.FineTuneConfig(3)
	cfg.Accum, cfg.EvalEvery = 1, 0
	for _, c := range []struct {
		ft   finetune.Config
		want string
	}{
		{finetune.Config{Base: base, Method: finetune.MethodFull, Train: trainFile}, "a full fine-tune trains every weight"},
		{finetune.Config{Base: base, Method: finetune.MethodLoRA, Rank: 2, Alpha: 16, Targets: []string{"all"}, Train: trainFile, Quantize: 4}, "quantized already"},
	} {
		f, err := finetune.New(cfg, c.ft, filepath.Join(t.TempDir(), "ft"))
		if err == nil {
			_, err = f.Run(context.Background(), "")
		}
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "4-bit, groups of 32") {
			t.Errorf("%s fine-tune (quantize %d) over a quantized base: %v, want an error saying %q", c.ft.Method, c.ft.Quantize, err, c.want)
		}
	}
	ck, err := train.LoadCheckpoint(base)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Free()
	m, err := model.New(ck.State.Config.Model)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ck.OrderedParams(m); err == nil || !strings.Contains(err.Error(), "quantized model") {
		t.Errorf("the whole-model parameters of a quantized checkpoint: %v, want a refusal naming it", err)
	}
	sum := runFineTune(t, cfg, finetune.Config{Base: base, Method: finetune.MethodLoRA, Rank: 2, Alpha: 16, Targets: []string{"all"}, Train: trainFile}, filepath.Join(t.TempDir(), "lora"), "")
	if sum.Traces != 1 || !(sum.Loss < sum.FirstLoss) {
		t.Errorf("LoRA over the quantized base: %d traces, loss %.4f -> %.4f; want one trace and a lower loss", sum.Traces, sum.FirstLoss, sum.Loss)
	}
	if _, err := SampleCheckpoint(base, "the ", "cpu", SampleOptions{Options: generate.Options{Sampling: generate.Sampling{MaxTokens: 4}}}); err != nil {
		t.Errorf("sampling the quantized base: %v", err)
	}
	if _, err := SampleAdapted(sum.LastCheckpoint, "", "the ", "cpu", SampleOptions{Options: generate.Options{Sampling: generate.Sampling{MaxTokens: 4}}}); err != nil {
		t.Errorf("sampling the adapters over the quantized base: %v", err)
	}
}
