package train

import (
	"strings"
	"testing"

	"github.com/posttrainllm/posttrainllm/data"
	"github.com/posttrainllm/posttrainllm/internal/runtest/fixture"
	"github.com/posttrainllm/posttrainllm/step"
)

// Updates on windows gathered from a token stream are the updates on the
// same windows copied on the host, bit for bit, compiled and interpreted,
// with accumulation, and the step traces once.
func TestTokenStreamMatchesHostWindows(t *testing.T) {
	ds := memoryDataset(t, fixture.SyntheticText(6000), 32)
	for _, compile := range []bool{true, false} {
		cfg := tinyConfig()
		cfg.Compile, cfg.Accum, cfg.Steps, cfg.Warmup = compile, 2, 5, 2
		host, _, cfg := preparedSetup(t, cfg)
		dev, _, _ := preparedSetup(t, cfg)
		stream, err := step.NewTokenStream(ds.Train, cfg.Model.Context)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(stream.Free)
		hs, _ := data.NewSampler(ds.Train, cfg.Model.Context, 3)
		ss, _ := data.NewSampler(ds.Train, cfg.Model.Context, 3)
		hb, _ := host.Plan.NewBatch(cfg.Model.Context)
		sb, _ := data.NewStartsBatch(host.Plan.Steps, host.Plan.MicroBatch, cfg.Model.Context)
		for i := range cfg.Steps {
			if err := hs.FillBatch(hb); err != nil {
				t.Fatal(err)
			}
			if err := ss.FillBatch(sb); err != nil {
				t.Fatal(err)
			}
			lr := host.Schedule.LR(i)
			want, err := host.State.Update(lr, step.BatchOf(hb))
			if err != nil {
				t.Fatal(err)
			}
			got, err := dev.State.Update(lr, stream.Batch(sb))
			if err != nil {
				t.Fatal(err)
			}
			if got != want {
				t.Fatalf("compile=%v update %d: loss %g from the stream, %g from host windows", compile, i, got, want)
			}
		}
		for i, p := range host.State.Params() {
			a, _ := p.Float32s()
			b, err := dev.State.Params()[i].Float32s()
			if err != nil {
				t.Fatal(err)
			}
			for j := range a {
				if a[j] != b[j] {
					t.Fatalf("compile=%v parameter %d [%d]: %g from host windows, %g from the stream", compile, i, j, a[j], b[j])
				}
			}
		}
		if want := map[bool]int{true: 1, false: cfg.Steps}[compile]; dev.Step.Traces() != want {
			t.Errorf("compile=%v: %d traces of the stream's step, want %d", compile, dev.Step.Traces(), want)
		}
	}
}

// A batch of starts that is incomplete, mixed with tokens or reaching
// outside the stream is refused, naming what is wrong, and the state
// keeps its parameters.
func TestTokenStreamRejectsBadBatches(t *testing.T) {
	s, host := stateSetup(t)
	cfg := s.Config
	view := data.NewTokens(make([]int32, 100)).All()
	stream, err := step.NewTokenStream(view, cfg.Model.Context)
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Free()
	good := step.Batch{Stream: stream, Starts: make([]int32, cfg.Accum*cfg.Batch), N: cfg.Accum, B: cfg.Batch, T: cfg.Model.Context}
	last := int32(100 - cfg.Model.Context - 1)
	good.Starts[0] = last
	before, _ := s.State.Params()[0].Float32s()
	for _, c := range []struct {
		name string
		edit func(b *step.Batch)
		want string
	}{
		{"start past the end", func(b *step.Batch) { b.Starts = append([]int32{last + 1}, b.Starts[1:]...) }, "window start 68"},
		{"negative start", func(b *step.Batch) { b.Starts = append([]int32{-1}, b.Starts[1:]...) }, "window start -1"},
		{"short starts", func(b *step.Batch) { b.Starts = b.Starts[1:] }, "window starts"},
		{"no stream", func(b *step.Batch) { b.Stream = nil }, "no token stream"},
		{"tokens too", func(b *step.Batch) { b.X = host.X }, "one form"},
		{"other context", func(b *step.Batch) { b.T = 16 }, "context 32"},
	} {
		b := good
		c.edit(&b)
		if _, err := s.State.Update(1e-3, b); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want one containing %q", c.name, err, c.want)
		}
	}
	after, _ := s.State.Params()[0].Float32s()
	for i := range before {
		if before[i] != after[i] {
			t.Fatal("a refused batch changed the parameters")
		}
	}
	if _, err := s.State.Update(1e-3, good); err != nil {
		t.Fatalf("the good batch of starts: %v", err)
	}
	if _, err := step.NewTokenStream(view, 100); err == nil || !strings.Contains(err.Error(), "100 tokens") {
		t.Errorf("a stream of 100 tokens for context 100: err = %v", err)
	}
}

func TestWindowSource(t *testing.T) {
	gpu := Config{Device: "gpu", Optimizer: "adamw"}
	for _, c := range []struct {
		name   string
		edit   func(c *Config)
		n      int
		device bool
		why    string
	}{
		{"gpu default", func(*Config) {}, 1000, true, ""},
		{"cpu default", func(c *Config) { c.Device = "cpu" }, 1000, false, "CPU"},
		{"cpu asked", func(c *Config) { c.Device, c.Windows = "cpu", "device" }, 1000, true, ""},
		{"host asked", func(c *Config) { c.Windows = "host" }, 1000, false, "windows = host"},
		{"dropout", func(c *Config) { c.BPEDropout = 0.1 }, 1000, false, "BPE-dropout"},
		{"galore", func(c *Config) { c.Optimizer = "galore" }, 1000, false, "galore"},
		{"long corpus", func(*Config) {}, step.MaxStreamTokens + 1, false, "more than"},
	} {
		cfg := gpu
		c.edit(&cfg)
		device, why := WindowSource(cfg, c.n)
		if device != c.device || !strings.Contains(why, c.why) {
			t.Errorf("%s: WindowSource = %v, %q; want %v, %q", c.name, device, why, c.device, c.why)
		}
	}
	bad := tinyConfig()
	bad.Windows = "gpu"
	if err := bad.WithDefaults().Validate(); err == nil || !strings.Contains(err.Error(), `windows = "gpu"`) {
		t.Errorf("windows gpu: err = %v, want one naming the value", err)
	}
}
