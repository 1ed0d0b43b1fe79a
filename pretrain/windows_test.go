package pretrain

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/posttrainllm/posttrainllm/internal/runtest"
	"github.com/posttrainllm/posttrainllm/internal/runtest/fixture"
	"github.com/posttrainllm/posttrainllm/train"
)

// A run whose windows are gathered on the device logs the losses of the
// same run with windows copied from the host, and says so in its start.
func TestTrainerWindowsOnDeviceMatchHost(t *testing.T) {
	cfg := runtest.TinyConfig()
	cfg.Accum = 2
	ds := memoryDataset(t, fixture.SyntheticText(60_000), cfg.Model.Context)
	losses := map[string][]float64{}
	for _, w := range []string{"host", "device"} {
		cfg.Windows = w
		tr, err := New(cfg, ds, t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		var start train.Start
		tr.Hooks.OnStart = func(s train.Start) { start = s }
		if _, err := tr.Run(context.Background(), ""); err != nil {
			t.Fatal(err)
		}
		if want := map[string]string{"host": "copied from the host", "device": "gathered on the device"}[w]; !strings.HasPrefix(start.Windows, want) {
			t.Errorf("windows %s: the start says %q, want %q…", w, start.Windows, want)
		}
		ms, err := train.ReadMetrics(filepath.Join(tr.RunDir, train.MetricsFile))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range ms {
			losses[w] = append(losses[w], m.Loss)
		}
	}
	if len(losses["host"]) != cfg.Steps || !slices.Equal(losses["host"], losses["device"]) {
		t.Fatalf("losses with host windows %v, with device windows %v; want the same %d", losses["host"], losses["device"], cfg.Steps)
	}
}
