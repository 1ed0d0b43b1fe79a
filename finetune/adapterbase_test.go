package finetune

import (
	"math"
	"testing"

	"github.com/posttrainllm/posttrainllm/internal/mlxtest"
	"github.com/posttrainllm/posttrainllm/mlx"
	"github.com/posttrainllm/posttrainllm/model"
	"github.com/posttrainllm/posttrainllm/optim"
	"github.com/posttrainllm/posttrainllm/peft"
	"github.com/posttrainllm/posttrainllm/step"
	"github.com/posttrainllm/posttrainllm/train"
)

// loraLosses runs 4 LoRA updates (rank 2, every projection) of cfg's
// model, either as a fine-tune runs them (frozen base cast once to the
// compute dtype, adapters fed as copies in it) or with the float32
// adapters and masters fed as they are, and returns the losses and the
// state's dtypes. perProjection lays the adapters out one product per
// projection (peft.Adapter.PerProjection) rather than grouped.
func loraLosses(t testing.TB, cfg train.Config, asRun, perProjection bool) (losses []float64, frozen, params []mlx.Dtype, traces int) {
	_, xs, ys, ws := weightedFixture(t)
	m, err := model.New(cfg.Model)
	if err != nil {
		t.Fatal(err)
	}
	a, err := peft.New(peft.Config{Method: peft.LoRA, Rank: 2, Alpha: 4, Targets: []string{"all"}}, m.Specs)
	if err != nil {
		t.Fatal(err)
	}
	a.PerProjection = perProjection
	opt, err := optim.New("adamw", AdapterOptimizerParams(a), optim.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	base, err := m.Init(1)
	if err != nil {
		t.Fatal(err)
	}
	opts := step.StepOptions{Accum: 2, GradClip: 1, Compile: true}
	if asRun {
		if err := CastFrozenBase(cfg, base); err != nil {
			t.Fatal(err)
		}
		opts = AdapterStepOptions(opts, cfg.Model)
	}
	ad, err := a.Init(2, base)
	if err != nil {
		t.Fatal(err)
	}
	optState, err := opt.Init()
	if err != nil {
		t.Fatal(err)
	}
	s, err := step.NewStep(adapterLoss(m, a), opt, step.Layout{Trainable: len(ad), Frozen: len(base), State: len(optState), Inputs: step.WeightedInputs}, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Free()
	st, err := step.NewFrozenState(s, ad, base, optState)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Free()
	for i := 0; i < 4; i++ {
		l, err := st.Update(1e-2, step.Batch{X: xs, Y: ys, W: ws, N: 2, B: 2, T: 6})
		if err != nil {
			t.Fatal(err)
		}
		losses = append(losses, l)
	}
	for _, b := range st.Frozen() {
		frozen = append(frozen, b.Dtype())
	}
	for _, p := range st.Params() {
		params = append(params, p.Dtype())
	}
	return losses, frozen, params, s.Traces()
}

// A LoRA fine-tune of a bfloat16 model keeps its frozen base in bfloat16
// (no float32 master, no cast per microbatch) and multiplies by bfloat16
// copies of the adapters, while the optimizer updates float32 adapters:
// its losses follow those of float32 adapter products to bfloat16's
// precision, and the step traces once.
func TestAdapterStepComputesInTheModelsDtype(t *testing.T) {
	cfg := train.Config{Model: model.Config{VocabSize: 32, DModel: 16, Layers: 1, Heads: 2, Context: 6,
		Dtype: "bfloat16", MasterFP32: true}, Accum: 2, GradClip: 1, Compile: true}
	mlxtest.Run(t, func(t testing.TB) {
		if o := AdapterStepOptions(step.StepOptions{}, cfg.Model); !o.ComputeCopies || o.ComputeDtype != mlx.BFloat16 {
			t.Fatalf("AdapterStepOptions of a bfloat16 model: copies %v in %v, want bfloat16 copies", o.ComputeCopies, o.ComputeDtype)
		}
		f32 := cfg
		f32.Model.Dtype, f32.Model.MasterFP32 = "float32", false
		if o := AdapterStepOptions(step.StepOptions{}, f32.Model); o.ComputeCopies {
			t.Errorf("AdapterStepOptions of a float32 model takes copies in %v, want none", o.ComputeDtype)
		}
		run, frozen, params, traces := loraLosses(t, cfg, true, false)
		ref, refFrozen, _, _ := loraLosses(t, cfg, false, false)
		for i, d := range frozen {
			if d != mlx.BFloat16 {
				t.Errorf("frozen base array %d is %v, want bfloat16 (the float32 reference holds %v)", i, d, refFrozen[i])
			}
		}
		for i, d := range params {
			if d != mlx.Float32 {
				t.Errorf("adapter array %d is %v, want float32 masters", i, d)
			}
		}
		if traces != 1 {
			t.Errorf("traced %d times over 4 updates, want 1", traces)
		}
		for i := range run {
			if math.Abs(run[i]-ref[i]) > 2e-2*ref[i] || math.IsNaN(run[i]) {
				t.Errorf("update %d: loss %.5f with bfloat16 adapter products, %.5f with float32 ones", i, run[i], ref[i])
			}
		}
		if run[3] >= run[0] {
			t.Errorf("losses %v do not fall", run)
		}
		t.Logf("bfloat16 adapter products %v, float32 %v", run, ref)
	})
}

// NewAdapter lays a fine-tune's adapters out for its device: grouped on a
// GPU, one product per projection on the CPU, quantized weights
// dequantized where they are used on the CPU and CUDA; both layouts train
// alike (the same losses over 4 updates of a SwiGLU model with every
// projection adapted, to float32 rounding).
func TestNewAdapterLayoutByDevice(t *testing.T) {
	cfg := train.Config{Model: model.Config{VocabSize: 32, DModel: 16, Layers: 2, Heads: 2, KVHeads: 1, Context: 6,
		MLP: "swiglu"}, Accum: 2, GradClip: 1, Compile: true}
	m, err := model.New(cfg.Model)
	if err != nil {
		t.Fatal(err)
	}
	ac := peft.Config{Method: peft.LoRA, Rank: 2, Alpha: 4, Targets: []string{"all"}}
	for device, want := range map[string]bool{"cpu": true, "gpu": false} {
		cfg.Device = device
		a, err := NewAdapter(cfg, ac, m.Specs)
		if err != nil {
			t.Fatal(err)
		}
		dequantized := device == "cpu" || mlx.CUDAAvailable()
		head := device == "gpu" && mlx.CUDAAvailable()
		if a.PerProjection != want || a.DequantizedProducts != dequantized || a.DequantizedHead != head {
			t.Errorf("device %s: PerProjection %v, DequantizedProducts %v, DequantizedHead %v; want %v, %v and %v",
				device, a.PerProjection, a.DequantizedProducts, a.DequantizedHead, want, dequantized, head)
		}
	}
	if _, err := NewAdapter(cfg, peft.Config{Method: peft.LoRA, Rank: 0, Targets: []string{"all"}}, m.Specs); err == nil {
		t.Error("NewAdapter accepted rank 0")
	}
	mlxtest.Run(t, func(t testing.TB) {
		per, _, _, _ := loraLosses(t, cfg, true, true)
		grouped, _, _, _ := loraLosses(t, cfg, true, false)
		for i := range per {
			if math.Abs(per[i]-grouped[i]) > 1e-5*math.Abs(grouped[i]) || math.IsNaN(per[i]) {
				t.Errorf("update %d: loss %.7f per projection, %.7f grouped", i, per[i], grouped[i])
			}
		}
		if per[3] >= per[0] {
			t.Errorf("losses %v do not fall", per)
		}
	})
}
