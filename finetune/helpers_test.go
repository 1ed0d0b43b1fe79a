package finetune

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/posttrainllm/posttrainllm/internal/distenv"
	"github.com/posttrainllm/posttrainllm/optim"

	"github.com/posttrainllm/posttrainllm/mlx"
	"github.com/posttrainllm/posttrainllm/model"
	"github.com/posttrainllm/posttrainllm/peft"
	"github.com/posttrainllm/posttrainllm/step"
	"github.com/posttrainllm/posttrainllm/train"
)

// fullLoss is SFT's loss of a full fine-tune of m.
func fullLoss(m *model.Transformer) step.Loss { return SupervisedObjective{}.Loss(Policy{Model: m}) }

// adapterLoss is SFT's loss of fine-tuning m through adapter a.
func adapterLoss(m *model.Transformer, a *peft.Adapter) step.Loss {
	return SupervisedObjective{}.Loss(Policy{Model: m, Adapter: a})
}

// packedFullLoss is SFT's loss of a full fine-tune of m over packed rows.
func packedFullLoss(m *model.Transformer) step.Loss {
	return SupervisedObjective{Pack: true}.Loss(Policy{Model: m})
}

// hostNormalize divides w by its sum, as the step does with row and loss
// weights, and returns the sum.
func hostNormalize(w []float32) ([]float32, float64) {
	total := 0.0
	for _, v := range w {
		total += float64(v)
	}
	out, inv := make([]float32, len(w)), 1/total
	for i, v := range w {
		out[i] = float32(float64(v) * inv)
	}
	return out, total
}

// The helpers below are copies of train's test helpers,
// which a test of this package cannot import.

// syntheticText is deterministic, learnable text: repeated phrases with
// some variety, enough for a tiny model's loss to fall quickly.
func syntheticText(n int) string {
	words := []string{"the", "quick", "brown", "fox", "jumps", "over", "a", "lazy", "dog", "and", "runs", "home"}
	var b strings.Builder
	for i := 0; b.Len() < n; i++ {
		b.WriteString(words[(i*7+i/5)%len(words)])
		if i%9 == 8 {
			b.WriteString(".\n")
		} else {
			b.WriteByte(' ')
		}
	}
	return b.String()
}

// tinyConfig is a run small enough for unit tests on two CPU cores.
func tinyConfig() train.Config {
	return train.Config{
		Model:     model.Config{VocabSize: 256, DModel: 32, Layers: 2, Heads: 2, Context: 32},
		Tokenizer: "byte",
		Steps:     20, Batch: 4, Accum: 1,
		Optimizer: "adamw", Schedule: "cosine", LR: 3e-3, MinLR: 3e-4, Warmup: 5,
		GradClip: 1, Compile: true, Device: "cpu", Seed: 1,
		LogEvery: 1, EvalTokens: 256, // 2 batches
	}
}

// plainSGD updates p ← p − lr·g, so a step's parameter change is −lr × the
// averaged gradient.
func plainSGD(t testing.TB, m *model.Transformer) optim.Optimizer {
	t.Helper()
	oc := optim.DefaultConfig()
	oc.SGD.Momentum, oc.SGD.WeightDecay = 0, 0
	o, err := optim.New("sgd", train.OptimizerParams(m.Specs), oc)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// runRanks runs the test helper named helper as n processes, the ranks
// of a loopback ring, each with the environment variable env set, and
// fails the test with a rank's output if it fails. The context bounds a
// hang, it measures no speed.
func runRanks(t *testing.T, n int, helper, env string) {
	t.Helper()
	hostfile := filepath.Join(t.TempDir(), "hosts.json")
	if err := distenv.LoopbackRing(hostfile, n); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmds := make([]*exec.Cmd, n)
	logs := make([]*bytes.Buffer, n)
	for r := range cmds {
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^"+helper+"$", "-test.count=1")
		cmd.Env = append(append(os.Environ(), env), distenv.Ring(r, hostfile)...)
		logs[r] = new(bytes.Buffer)
		cmd.Stdout, cmd.Stderr = logs[r], logs[r]
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds[r] = cmd
	}
	for r, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Fatalf("rank %d: %v (context: %v)\n%s", r, err, ctx.Err(), logs[r])
		}
	}
}

// initRing joins this process to the ring its environment names.
func initRing() (*mlx.Group, error) {
	var g *mlx.Group
	err := mlx.Do(func() error {
		var err error
		g, err = mlx.InitDistributed(true, "ring")
		return err
	})
	return g, err
}
