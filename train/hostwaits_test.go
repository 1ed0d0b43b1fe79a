package train

import (
	"context"
	"fmt"
	"testing"

	"github.com/posttrainllm/posttrainllm/mlx"
)

// Between two logs L updates apart a run waits for the device L + 1 times
// (mlx.HostWaits): once per update for the previous update's gradient
// norm, State.UpdateAsync's bound on the updates in flight (not in the
// update right after a log, whose predecessor the log has read), and twice
// at the log, reading the loss and the gradient norm. bench's pipelined
// loop (train/bench) makes the same calls, and its figure is what the
// trainer gets only while the trainer waits no more often: a wait added
// to every update, to read or average its loss say, stalls the device
// each time on a GPU. Both window forms, and accumulation, wait alike.
func TestTrainerWaitsForTheDeviceOncePerUpdate(t *testing.T) {
	const every = 5
	for _, tc := range []struct {
		windows string
		accum   int
	}{{"host", 1}, {"device", 1}, {"host", 3}} {
		t.Run(fmt.Sprintf("%s windows, accum %d", tc.windows, tc.accum), func(t *testing.T) {
			cfg := tinyConfig()
			cfg.Steps, cfg.LogEvery, cfg.EvalEvery, cfg.CheckpointEvery = 4*every, every, 0, 0
			cfg.Windows, cfg.Accum = tc.windows, tc.accum
			tr, err := New(cfg, memoryDataset(t, syntheticText(60_000), cfg.Model.Context), t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			var steps []int
			var waits []uint64
			tr.Hooks.OnLog = func(m Metrics) {
				steps = append(steps, m.Step)
				waits = append(waits, mlx.HostWaits())
			}
			if _, err := tr.Run(context.Background(), ""); err != nil {
				t.Fatal(err)
			}
			if len(steps) != 4 || steps[0] != every {
				t.Fatalf("logged at steps %v, want every %d of %d", steps, every, cfg.Steps)
			}
			// The last log also checks and writes the final checkpoint.
			for i := 1; i < len(waits)-1; i++ {
				if got := waits[i] - waits[i-1]; got != every+1 {
					t.Errorf("steps %d to %d: the host waited for the device %d times, want %d (one per update and two reads at the log)",
						steps[i-1]+1, steps[i], got, every+1)
				}
			}
		})
	}
}
