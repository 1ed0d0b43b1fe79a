package mlx

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/posttrainllm/posttrainllm/internal/distenv"
)

// ringRankEnv marks a process that TestAllSumRingTwoRanks started as one
// rank of its ring.
const ringRankEnv = "PTLM_TEST_RING_RANK"

// unsetRingEnv removes the ring backend's configuration from the
// environment for the test (MLX reads an empty variable as set).
func unsetRingEnv(t *testing.T) {
	for _, k := range []string{"MLX_RANK", "MLX_HOSTFILE"} {
		t.Setenv(k, "") // restores the old value after the test
		os.Unsetenv(k)
	}
}

func TestRingBackendAvailable(t *testing.T) {
	if !DistributedAvailable("ring") {
		t.Fatal(`DistributedAvailable("ring") = false, want the ring backend in every MLX build`)
	}
	if DistributedAvailable("no-such-backend") {
		t.Fatal(`DistributedAvailable("no-such-backend") = true, want false`)
	}
}

// A size-1 group (no backend configured, not strict) makes every
// collective return its input, eagerly and inside a compiled function.
func TestSingletonGroupCollectivesAreIdentity(t *testing.T) {
	unsetRingEnv(t)
	onMLX(t, func() {
		g, err := InitDistributed(false, "ring")
		if err != nil {
			t.Fatal(err)
		}
		if g.Rank() != 0 || g.Size() != 1 {
			t.Fatalf("group without a configured backend is %v, want rank 0 of 1", g)
		}
		x := FromSlice([]float32{1, -2, 3}, 3)
		for name, got := range map[string]*Array{"all_sum": AllSum(x, g), "all_max": AllMax(x, g), "all_gather": AllGather(x, g)} {
			checkClose(t, name, got, []int{3}, []float64{1, -2, 3}, 0)
		}
		var nilGroup *Group
		checkClose(t, "all_sum over a nil group", AllSum(x, nilGroup), []int{3}, []float64{1, -2, 3}, 0)
	})
}

func TestStrictInitWithoutConfigurationFails(t *testing.T) {
	unsetRingEnv(t)
	err := Do(func() error {
		_, err := InitDistributed(true, "ring")
		return err
	})
	if err == nil || !strings.Contains(err.Error(), "ring") {
		t.Fatalf("strict ring init without MLX_RANK and MLX_HOSTFILE: err = %v, want an error naming the backend", err)
	}
}

// Two processes on a loopback ring: all_sum, all_max and all_gather give
// the same combined result on both ranks, eagerly and inside a compiled
// function. The context bounds a hang (a collective that never completes),
// it measures no speed.
func TestCollectivesRingTwoRanks(t *testing.T) {
	hostfile := filepath.Join(t.TempDir(), "hosts.json")
	if err := distenv.LoopbackRing(hostfile, 2); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmds := make([]*exec.Cmd, 2)
	outs := make([]*bytes.Buffer, 2)
	for r := range cmds {
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestHelperRingRank$", "-test.count=1")
		cmd.Env = append(append(os.Environ(), ringRankEnv+"=1"), distenv.Ring(r, hostfile)...)
		outs[r] = new(bytes.Buffer)
		cmd.Stdout, cmd.Stderr = outs[r], outs[r]
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds[r] = cmd
	}
	for r, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Fatalf("rank %d: %v (context: %v)\n%s", r, err, ctx.Err(), outs[r])
		}
	}
	for r, out := range outs {
		want := fmt.Sprintf("rank %d of 2: sum [3 30] compiled sum [3 30] max [2 20] gather [1 10 2 20]", r)
		if !strings.Contains(out.String(), want) {
			t.Errorf("rank %d printed\n%s\nwant a line %q", r, out, want)
		}
	}
}

// TestHelperRingRank is one rank of TestCollectivesRingTwoRanks; run
// directly it does nothing.
func TestHelperRingRank(t *testing.T) {
	if os.Getenv(ringRankEnv) == "" {
		return
	}
	onMLX(t, func() {
		g, err := InitDistributed(true, "ring")
		if err != nil {
			t.Fatal(err)
		}
		v := float32(g.Rank() + 1)
		x := FromSlice([]float32{v, 10 * v}, 2)
		sum := AllSum(x, g)
		compiled, err := Compile(func(in []*Array) ([]*Array, error) {
			return []*Array{AllSum(in[0], g)}, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		defer compiled.Free()
		csum, err := compiled.Call(x)
		if err != nil {
			t.Fatal(err)
		}
		show := func(a *Array) string {
			f, err := a.Float32s()
			if err != nil {
				t.Fatal(err)
			}
			return fmt.Sprint(f)
		}
		fmt.Printf("%v of %d: sum %s compiled sum %s max %s gather %s\n", "rank "+fmt.Sprint(g.Rank()), g.Size(),
			show(sum), show(csum[0]), show(AllMax(x, g)), show(AllGather(x, g)))
	})
}
