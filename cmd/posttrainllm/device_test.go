package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/posttrainllm/posttrainllm/mlx"
)

func TestChooseDevice(t *testing.T) {
	for _, c := range []struct {
		choice deviceChoice
		want   string
	}{
		// auto takes the GPU where there is one, whatever the settings say.
		{deviceChoice{flag: "auto", settings: "cpu", label: "tiny", hasGPU: false}, "cpu"},
		{deviceChoice{flag: "auto", settings: "cpu", label: "tiny", hasGPU: true}, "gpu"},
		{deviceChoice{flag: "auto", settings: "gpu", label: "huge", hasGPU: true}, "gpu"},
		{deviceChoice{flag: "", settings: "cpu", label: "small", hasGPU: true}, "gpu"},
		// An explicit device is obeyed: the CPU even for a GPU preset.
		{deviceChoice{flag: "cpu", settings: "gpu", label: "huge", hasGPU: false}, "cpu"},
		{deviceChoice{flag: "cpu", settings: "cpu", label: "tiny", hasGPU: true}, "cpu"},
		{deviceChoice{flag: "gpu", settings: "cpu", label: "tiny", hasGPU: true}, "gpu"},
		{deviceChoice{flag: "metal", settings: "cpu", label: "tiny", hasGPU: true}, "gpu"},
		{deviceChoice{flag: "cuda", settings: "gpu", label: "mega", hasGPU: true}, "gpu"},
	} {
		got, err := chooseDevice(c.choice)
		if err != nil || got != c.want {
			t.Errorf("%+v: %q, %v; want %q", c.choice, got, err, c.want)
		}
	}
}

// What cannot run is refused with one clear line that names the preset
// (or checkpoint), the device and the way out.
func TestChooseDeviceErrors(t *testing.T) {
	for _, c := range []struct {
		choice deviceChoice
		want   []string
	}{
		{deviceChoice{flag: "auto", settings: "gpu", label: "huge"}, []string{"preset huge needs a GPU", "--device cpu"}},
		{deviceChoice{flag: "auto", settings: "gpu", label: "behemoth"}, []string{"preset behemoth needs a GPU", "--device cpu"}},
		{deviceChoice{flag: "auto", settings: "gpu", label: "resumed"}, []string{"checkpoint needs a GPU", "--device cpu"}},
		{deviceChoice{flag: "gpu", settings: "cpu", label: "tiny"}, []string{"invalid --device gpu", "no GPU"}},
		{deviceChoice{flag: "tpu", settings: "cpu", label: "tiny", hasGPU: true}, []string{"invalid --device tpu", "want auto, cpu or gpu"}},
	} {
		_, err := chooseDevice(c.choice)
		if err == nil {
			t.Errorf("%+v: no error", c.choice)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%+v: %q does not say %q", c.choice, err, w)
			}
		}
	}
}

// On a machine whose MLX has no GPU, the GPU presets stop before writing
// anything, and --device cpu gets past that check (to --out's, here).
func TestGPUPresetOnCPUOnlyMLX(t *testing.T) {
	if mlx.GPU.Available() {
		t.Skip("this MLX build has a GPU")
	}
	dir := t.TempDir()
	out := filepath.Join(dir, "run")
	for _, preset := range []string{"huge", "mega", "behemoth"} {
		r := runCLI(t, "train", "--preset", preset, "--out", out)
		if r.code != exitUsage || !strings.Contains(r.stderr, "preset "+preset+" needs a GPU") || !strings.Contains(r.stderr, "--device cpu") {
			t.Errorf("train --preset %s: exit %d, stderr %q; want a usage error that it needs a GPU", preset, r.code, r.stderr)
		}
	}
	r := runCLI(t, "bench", "--preset", "huge")
	if r.code != exitUsage || !strings.Contains(r.stderr, "preset huge needs a GPU") {
		t.Errorf("bench --preset huge: exit %d, stderr %q", r.code, r.stderr)
	}
	if entries, _ := filepath.Glob(filepath.Join(dir, "*")); len(entries) != 0 {
		t.Errorf("refused runs wrote %v", entries)
	}
	// --out is a file: the run fails on --out, after the device check.
	file := filepath.Join(dir, "file.txt")
	if err := os.WriteFile(file, []byte("not a folder"), 0o644); err != nil {
		t.Fatal(err)
	}
	r = runCLI(t, "train", "--preset", "huge", "--device", "cpu", "--out", file)
	if r.code == 0 || strings.Contains(r.stderr, "needs a GPU") || !strings.Contains(r.stderr, "invalid --out") {
		t.Errorf("train --preset huge --device cpu: exit %d, stderr %q; want it past the device check", r.code, r.stderr)
	}
}
