package runfolder

import (
	"path/filepath"
	"testing"

	"github.com/posttrainllm/posttrainllm/finetune"
	"github.com/posttrainllm/posttrainllm/generate"
	"github.com/posttrainllm/posttrainllm/internal/runtest"
	"github.com/posttrainllm/posttrainllm/model"
	"github.com/posttrainllm/posttrainllm/train"
)

// A full fine-tune trains every parameter and its checkpoints are
// ordinary checkpoints: sample and eval open them as they are.
func TestFullFineTuneWritesOrdinaryCheckpoint(t *testing.T) {
	base := runtest.WriteBase(t)
	ft := finetune.Config{Base: base, Method: finetune.MethodFull,
		Train: runtest.WriteCompletions(t, "train.jsonl", 0, 20), MaskPrompt: true}
	cfg := runtest.FineTuneConfig(3)
	cfg.LR = 1e-3
	sum := runFineTune(t, cfg, ft, filepath.Join(t.TempDir(), "full"), "")
	ck, err := train.LoadCheckpoint(sum.LastCheckpoint)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Free()
	m, err := model.New(ck.State.Config.Model)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ck.OrderedParams(m); err != nil {
		t.Fatalf("the full fine-tune's checkpoint is no ordinary checkpoint: %v", err)
	}
	if _, err := SampleCheckpoint(sum.LastCheckpoint, "the", "cpu", SampleOptions{Options: generate.Options{Sampling: generate.Sampling{MaxTokens: 4}}}); err != nil {
		t.Errorf("sampling the full fine-tune: %v", err)
	}
}
