package presets

import (
	"context"
	"math"
	"testing"

	"github.com/posttrainllm/posttrainllm/pretrain"
)

// Training the tiny preset on the default corpus (the Go standard library's
// sources) for 300 steps lowers the held-out loss from about ln(vocab) by a
// wide margin.
func TestTinyPresetLearnsDefaultCorpus(t *testing.T) {
	cfg, err := Load("tiny")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Steps, cfg.EvalEvery, cfg.CheckpointEvery = 300, 300, 0
	ds, err := pretrain.OpenDataset("", cfg.Tokenizer, t.TempDir(), cfg.Model.Context, cfg.ValFraction)
	if err != nil {
		t.Fatal(err)
	}
	defer ds.Close()
	tr, err := pretrain.New(cfg, ds, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	sum, err := tr.Run(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	lnV := math.Log(float64(tr.Config.Model.VocabSize))
	if math.Abs(sum.InitialValLoss-lnV) > 0.25 {
		t.Fatalf("initial held-out loss %.3f, want about ln(%d) = %.3f", sum.InitialValLoss, tr.Config.Model.VocabSize, lnV)
	}
	if !(sum.ValLoss < lnV-2.5) {
		t.Fatalf("held-out loss after 300 steps %.3f, want below ln(V) − 2.5 = %.3f (started at %.3f)",
			sum.ValLoss, lnV-2.5, sum.InitialValLoss)
	}
	t.Logf("held-out loss %.3f -> %.3f over 300 steps in %v (%d trace)", sum.InitialValLoss, sum.ValLoss, sum.Elapsed, sum.Traces)
}
