package runfolder

// Test helpers that build on finetune, which internal/runtest cannot hold:
// finetune's own tests, which have the same, use runtest.

import (
	"context"
	"testing"

	"github.com/posttrainllm/posttrainllm/finetune"
	"github.com/posttrainllm/posttrainllm/model"
	"github.com/posttrainllm/posttrainllm/peft"
	"github.com/posttrainllm/posttrainllm/step"
	"github.com/posttrainllm/posttrainllm/train"
)

// runFineTune runs the fine-tune ft of cfg in dir, resuming from resume
// when it is not empty, and returns its summary.
func runFineTune(t testing.TB, cfg train.Config, ft finetune.Config, dir, resume string) train.Summary {
	t.Helper()
	f, err := finetune.New(cfg, ft, dir)
	if err != nil {
		t.Fatal(err)
	}
	sum, err := f.Run(context.Background(), resume)
	if err != nil {
		t.Fatal(err)
	}
	return sum
}

// fullLoss is SFT's loss of a full fine-tune of m.
func fullLoss(m *model.Transformer) step.Loss {
	return finetune.SupervisedObjective{}.Loss(finetune.Policy{Model: m})
}

// adapterLoss is SFT's loss of fine-tuning m through adapter a.
func adapterLoss(m *model.Transformer, a *peft.Adapter) step.Loss {
	return finetune.SupervisedObjective{}.Loss(finetune.Policy{Model: m, Adapter: a})
}
