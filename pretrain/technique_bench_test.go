package pretrain

import (
	"testing"

	"github.com/posttrainllm/posttrainllm/data"
	"github.com/posttrainllm/posttrainllm/internal/runtest"
	"github.com/posttrainllm/posttrainllm/internal/runtest/fixture"
	"github.com/posttrainllm/posttrainllm/model"
	"github.com/posttrainllm/posttrainllm/step"
	"github.com/posttrainllm/posttrainllm/train"
)

// techniqueSetup builds a setup of the tiny preset's model shape (d_model
// 64, 2 layers, context 64, batch 8, byte tokenizer) with optimizer opt,
// and one batch.
func techniqueSetup(b *testing.B, opt string) (*train.Setup, *model.Transformer, step.Batch) {
	b.Helper()
	cfg := runtest.TinyConfig()
	cfg.Model.DModel, cfg.Model.Heads, cfg.Model.Context, cfg.Batch = 64, 4, 64, 8
	cfg.Optimizer, cfg.GaLoreRank = opt, 16
	ds := memoryDataset(b, fixture.SyntheticText(60_000), cfg.Model.Context)
	s, m, cfg := runtest.PreparedSetup(b, cfg)
	sampler, err := data.NewSampler(ds.Train, cfg.Model.Context, cfg.Seed)
	if err != nil {
		b.Fatal(err)
	}
	batch, err := s.Plan.NewBatch(cfg.Model.Context)
	if err != nil {
		b.Fatal(err)
	}
	if err := sampler.FillBatch(batch); err != nil {
		b.Fatal(err)
	}
	return s, m, step.BatchOf(batch)
}

// BenchmarkGaLoreRefresh is one refresh of GaLore's projections (rank 16):
// a microbatch's gradient and one CPU SVD per hidden matrix. A run pays it
// every galore_gap updates.
func BenchmarkGaLoreRefresh(b *testing.B) {
	s, m, batch := techniqueSetup(b, "galore")
	r, err := NewGaLoreRefresher(s.Optimizer, m)
	if err != nil {
		b.Fatal(err)
	}
	defer r.Free()
	for b.Loop() {
		if err := r.Refresh(s.State, batch); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSophiaEstimate is one compiled Hessian estimate of Sophia:
// sampling labels, a forward and backward pass, the EMA. A run pays it
// every sophia_every updates.
func BenchmarkSophiaEstimate(b *testing.B) {
	s, m, batch := techniqueSetup(b, "sophia")
	e, err := NewSophiaEstimator(s.Optimizer, m, 1, true)
	if err != nil {
		b.Fatal(err)
	}
	defer e.Free()
	if err := e.Estimate(s.State, batch, 0); err != nil { // the trace
		b.Fatal(err)
	}
	upd := 1
	for b.Loop() {
		if err := e.Estimate(s.State, batch, upd); err != nil {
			b.Fatal(err)
		}
		if err := s.State.Eval(); err != nil {
			b.Fatal(err)
		}
		upd++
	}
}

// BenchmarkTechniqueStep is one compiled update of the same setup with
// each optimizer, the baseline the refresh and estimate costs compare to.
func BenchmarkTechniqueStep(b *testing.B) {
	for _, opt := range []string{"adamw", "galore", "sophia"} {
		b.Run(opt, func(b *testing.B) {
			s, _, batch := techniqueSetup(b, opt)
			if _, err := s.State.Update(1e-3, batch); err != nil { // the trace
				b.Fatal(err)
			}
			for b.Loop() {
				if _, err := s.State.Update(1e-3, batch); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
