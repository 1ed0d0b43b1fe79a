package pretrain

import (
	"context"
	"fmt"
	"testing"

	"github.com/posttrainllm/posttrainllm/internal/runtest"
	"github.com/posttrainllm/posttrainllm/internal/runtest/fixture"
	"github.com/posttrainllm/posttrainllm/mlx"
	"github.com/posttrainllm/posttrainllm/train"
)

// A run waits for the device (mlx.HostWaits) once per update, for the
// previous update's gradient norm, State.UpdateAsync's bound on the
// updates in flight, and a fixed number of times per log, where it reads
// the loss and the gradient norm: between two logs L updates apart it
// waits L + c times, c the log's reads, whatever L. bench's pipelined
// loop (train/bench, TestPipelinedWaitsForTheDeviceAsTheTrainerDoes) waits
// once per update too, and its figure is what the trainer gets only while
// the trainer adds no wait per update: reading or averaging every
// update's loss on the host, say, would stall a GPU at every update. Both
// window forms, and accumulation, wait alike.
func TestTrainerWaitsForTheDeviceOncePerUpdate(t *testing.T) {
	for _, tc := range []struct {
		windows string
		accum   int
	}{{"host", 1}, {"device", 1}, {"host", 3}} {
		t.Run(fmt.Sprintf("%s windows, accum %d", tc.windows, tc.accum), func(t *testing.T) {
			perLog := map[int]uint64{}
			for _, every := range []int{4, 8} {
				perLog[every] = waitsPerLog(t, tc.windows, tc.accum, every)
			}
			if perLog[8]-perLog[4] != 4 {
				t.Fatalf("the host waited for the device %d times between logs 4 updates apart and %d times 8 apart: %d more for 4 more updates, want 4 (one per update)",
					perLog[4], perLog[8], perLog[8]-perLog[4])
			}
			if perLog[4] < 4+1 {
				t.Fatalf("%d waits between logs 4 updates apart, want the updates' and at least the loss's read", perLog[4])
			}
		})
	}
}

// waitsPerLog runs 4·every updates of a tiny config, logging every
// updates, and returns how often the host waited for the device between
// two logs, the same for each pair of logs but the last (which also
// checks and writes the final checkpoint).
func waitsPerLog(t *testing.T, windows string, accum, every int) uint64 {
	t.Helper()
	cfg := runtest.TinyConfig()
	cfg.Steps, cfg.LogEvery, cfg.EvalEvery, cfg.CheckpointEvery = 4*every, every, 0, 0
	cfg.Windows, cfg.Accum = windows, accum
	tr, err := New(cfg, memoryDataset(t, fixture.SyntheticText(60_000), cfg.Model.Context), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	var steps []int
	var waits []uint64
	tr.Hooks.OnLog = func(m train.Metrics) {
		steps = append(steps, m.Step)
		waits = append(waits, mlx.HostWaits())
	}
	if _, err := tr.Run(context.Background(), ""); err != nil {
		t.Fatal(err)
	}
	if len(steps) != 4 || steps[0] != every {
		t.Fatalf("logged at steps %v, want every %d of %d", steps, every, cfg.Steps)
	}
	d := waits[1] - waits[0]
	if d2 := waits[2] - waits[1]; d2 != d {
		t.Fatalf("log every %d: the host waited %d times between the first two logs and %d between the next two, want the same", every, d, d2)
	}
	return d
}
