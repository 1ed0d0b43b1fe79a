package runfolder

import (
	"math"
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

// qloraConfig is the fine-tune of TestFineTuneLoRATracesOnceLearnsAndResumesExactly
// over a base quantized to bits in groups of 32.
func qloraConfig(t testing.TB, base string, bits int) finetune.Config {
	gs := 32
	if bits == 0 {
		gs = 0
	}
	return finetune.Config{Base: base, Method: finetune.MethodLoRA, Rank: 4, Alpha: 8, Targets: []string{"attn", "mlp"},
		Train: runtest.WriteCompletions(t, "train.jsonl", 0, 40), Valid: runtest.WriteCompletions(t, "valid.jsonl", 100, 10),
		MaskPrompt: true, Quantize: bits, QGroupSize: gs}
}

// A QLoRA fine-tune (4-bit base) with accumulation, a cosine schedule,
// gradient checkpointing and the chunked loss traces once and learns; its
// first held-out loss is within quantization error of the float base's and
// not equal to it; it samples; and fuse writes exactly the merge of its
// adapters into the dequantized base.
func TestQLoRAFineTune(t *testing.T) {
	base := runtest.WriteBase(t)
	cfg := runtest.FineTuneConfig(4)
	floatSum := runFineTune(t, cfg, qloraConfig(t, base, 0), filepath.Join(t.TempDir(), "float"), "")

	cfg.GradCheckpoint, cfg.LossChunk = true, 24
	ft := qloraConfig(t, base, 4)
	run := filepath.Join(t.TempDir(), "qlora")
	sum := runFineTune(t, cfg, ft, run, "")
	if sum.Traces != 1 {
		t.Errorf("traced %d times, want 1", sum.Traces)
	}
	if !(sum.ValLoss < sum.InitialValLoss) {
		t.Errorf("held-out loss %.4f -> %.4f, want it to fall", sum.InitialValLoss, sum.ValLoss)
	}
	if d := math.Abs(sum.InitialValLoss - floatSum.InitialValLoss); d == 0 || d > 0.02*floatSum.InitialValLoss {
		t.Errorf("initial held-out loss %.6f over the 4-bit base, %.6f over the float one: want a difference within quantization error",
			sum.InitialValLoss, floatSum.InitialValLoss)
	}
	if _, err := SampleAdapted(run, "", "the", "cpu", SampleOptions{Options: generate.Options{Sampling: generate.Sampling{MaxTokens: 4}}}); err != nil {
		t.Errorf("sampling the QLoRA fine-tune: %v", err)
	}
	fusedDir, err := Fuse(run, "", filepath.Join(t.TempDir(), "fused"), FuseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	mlxtest.Run(t, func(t testing.TB) {
		fused, err := train.LoadCheckpoint(fusedDir)
		if err != nil {
			t.Fatal(err)
		}
		defer fused.Free()
		m, err := model.New(fused.State.Config.Model)
		if err != nil {
			t.Fatal(err)
		}
		got, err := fused.OrderedParams(m)
		if err != nil {
			t.Fatal(err)
		}
		// The reference: quantize the float base, dequantize, merge by hand.
		ck, err := train.LoadCheckpoint(base)
		if err != nil {
			t.Fatal(err)
		}
		defer ck.Free()
		floatBase, err := ck.OrderedParams(m)
		if err != nil {
			t.Fatal(err)
		}
		q, frozen, err := peft.QuantizeBase(m.Specs, floatBase, 32, 4)
		if err != nil {
			t.Fatal(err)
		}
		a, err := peft.New(ft.Adapter(), m.Specs)
		if err != nil {
			t.Fatal(err)
		}
		adapters, err := checkpoint.LoadNamed(filepath.Join(sum.LastCheckpoint, checkpoint.AdapterFile), a.Names(), train.SpecShapes(a.Specs))
		if err != nil {
			t.Fatal(err)
		}
		want := a.Effective(q.Dequantize(frozen), adapters)
		for i := range want {
			g, err1 := got[i].Float32s()
			w, err2 := mlx.AsType(want[i], mlx.Float32).Float32s()
			if err1 != nil || err2 != nil {
				t.Fatal(err1, err2)
			}
			for e := range w {
				if g[e] != w[e] {
					t.Fatalf("fused %s[%d] = %g, the dequantized merge %g", m.Specs[i].Name, e, g[e], w[e])
				}
			}
		}
	})
}

func TestFullFineTuneRefusesQuantizedBase(t *testing.T) {
	ft := finetune.Config{Base: "b", Method: finetune.MethodFull, Train: "t.jsonl", Quantize: 4}
	err := ft.Validate()
	if err == nil || !strings.Contains(err.Error(), "quantize 4") || !strings.Contains(err.Error(), "full fine-tune") {
		t.Errorf("full fine-tune with quantize 4: error %v", err)
	}
	ft.Method, ft.Rank, ft.Alpha, ft.Targets = finetune.MethodLoRA, 4, 8, []string{"attn"}
	for _, c := range []struct {
		bits, gs int
		want     string
	}{{7, 0, "bits 7"}, {4, 48, "group size 48"}, {0, 64, "without quantize"}} {
		ft.Quantize, ft.QGroupSize = c.bits, c.gs
		if err := ft.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("quantize %d, group %d: error %v, want %q", c.bits, c.gs, err, c.want)
		}
	}
}
