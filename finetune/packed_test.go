package finetune

import (
	"math"
	"path/filepath"
	"testing"

	"github.com/posttrainllm/posttrainllm/data"
	"github.com/posttrainllm/posttrainllm/internal/mlxtest"
	"github.com/posttrainllm/posttrainllm/internal/runtest"
	"github.com/posttrainllm/posttrainllm/mlx"
	"github.com/posttrainllm/posttrainllm/step"
	"github.com/posttrainllm/posttrainllm/train"
)

// One update over packed rows, with document masking, has the loss and
// the resulting parameters (so the gradients) of the same update over the
// examples padded one per row.
func TestPackedUpdateEqualsUnpacked(t *testing.T) {
	cfg, m, err := train.Prepare(runtest.TinyConfig())
	if err != nil {
		t.Fatal(err)
	}
	cfg.Optimizer, cfg.GradClip = "sgd", 0
	var exs []data.Example
	for k, n := range []int{6, 9, 5, 8} {
		e := data.Example{}
		for i := range n {
			e.Tokens = append(e.Tokens, int32((k*37+i*11)%256))
			e.Train = append(e.Train, i >= 2) // a two-token prompt
		}
		exs = append(exs, e)
	}
	T := cfg.Model.Context
	packed, err := data.BuildRows(exs, T, 0, true)
	if err != nil {
		t.Fatal(err)
	}
	unpacked, err := data.BuildRows(exs, T, 0, false)
	if err != nil {
		t.Fatal(err)
	}
	if packed.Len() != 1 || unpacked.Len() != len(exs) || packed.Targets() != unpacked.Targets() {
		t.Fatalf("%d packed rows with %d targets, %d unpacked with %d; want 1 and %d rows, as many targets",
			packed.Len(), packed.Targets(), unpacked.Len(), unpacked.Targets(), len(exs))
	}
	update := func(rows *data.Rows, isPacked bool) (float64, []float32) {
		var loss float64
		var params []float32
		mlxtest.Run(t, func(t testing.TB) {
			base, err := m.Init(3)
			if err != nil {
				t.Fatal(err)
			}
			opt, err := train.NewOptimizer(cfg, m.Specs)
			if err != nil {
				t.Fatal(err)
			}
			optState, err := opt.Init()
			if err != nil {
				t.Fatal(err)
			}
			opts := step.StepOptions{Accum: 1, Compile: true}
			var upd *step.Step
			if isPacked {
				upd, err = step.NewStep(packedFullLoss(m), opt, step.Layout{Trainable: len(base), Frozen: 0, State: len(optState), Inputs: step.PackedInputs}, opts)
			} else {
				upd, err = step.NewStep(fullLoss(m), opt, step.Layout{Trainable: len(base), Frozen: 0, State: len(optState), Inputs: step.WeightedInputs}, opts)
			}
			if err != nil {
				t.Fatal(err)
			}
			defer upd.Free()
			st, err := step.NewFrozenState(upd, base, nil, optState)
			if err != nil {
				t.Fatal(err)
			}
			defer st.Free()
			if loss, err = st.Update(0.5, step.Batch{X: rows.X, Y: rows.Y, W: rows.W, Seg: rows.Seg, N: 1, B: rows.Len(), T: T}); err != nil {
				t.Fatal(err)
			}
			var flat []*mlx.Array
			for _, p := range st.Params() {
				flat = append(flat, mlx.Reshape(mlx.AsType(p, mlx.Float32), -1))
			}
			if params, err = mlx.Concatenate(flat, 0).Float32s(); err != nil {
				t.Fatal(err)
			}
		})
		return loss, params
	}
	wantLoss, want := update(unpacked, false)
	loss, got := update(packed, true)
	if math.Abs(loss-wantLoss) > 1e-5*wantLoss {
		t.Fatalf("packed loss %.7f, unpacked %.7f", loss, wantLoss)
	}
	for i := range want {
		if math.Abs(float64(got[i]-want[i])) > 1e-5 {
			t.Fatalf("parameter %d after the update: %g packed, %g unpacked", i, got[i], want[i])
		}
	}
	// A packed step refuses a batch without segments.
	mlxtest.Run(t, func(t testing.TB) {
		opt, _ := train.NewOptimizer(cfg, m.Specs)
		base, _ := m.Init(3)
		optState, _ := opt.Init()
		upd, err := step.NewStep(packedFullLoss(m), opt, step.Layout{Trainable: len(base), Frozen: 0, State: len(optState), Inputs: step.PackedInputs}, step.StepOptions{Accum: 1})
		if err != nil {
			t.Fatal(err)
		}
		st, err := step.NewFrozenState(upd, base, nil, optState)
		if err != nil {
			t.Fatal(err)
		}
		defer st.Free()
		if _, err := st.Update(0.5, step.Batch{X: packed.X, Y: packed.Y, W: packed.W, N: 1, B: 1, T: T}); err == nil {
			t.Fatal("a packed step took a batch without segments")
		}
	})
}

// A packed LoRA fine-tune with gradient checkpointing, accumulation and a
// cosine schedule traces once and learns.
func TestPackedFineTuneTracesOnceAndLearns(t *testing.T) {
	base := runtest.WriteBase(t)
	ft := Config{Base: base, Method: MethodLoRA, Rank: 4, Alpha: 8, Targets: []string{"all"},
		Train: runtest.WriteCompletions(t, "train.jsonl", 0, 40), Valid: runtest.WriteCompletions(t, "valid.jsonl", 100, 10),
		MaskPrompt: true, Pack: true}
	cfg := runtest.FineTuneConfig(6)
	cfg.GradCheckpoint = true
	sum := runFineTune(t, cfg, ft, filepath.Join(t.TempDir(), "packed"), "")
	if sum.Traces != 1 {
		t.Errorf("traced %d times, want 1", sum.Traces)
	}
	if !(sum.ValLoss < sum.InitialValLoss) {
		t.Errorf("held-out loss %.4f -> %.4f, want it to fall", sum.InitialValLoss, sum.ValLoss)
	}
}
