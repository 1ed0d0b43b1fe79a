package main

import (
	"runtime"

	"github.com/posttrainllm/posttrainllm/mlx"
	"github.com/posttrainllm/posttrainllm/train"
)

// deviceUsage is the --device flag's help of every command.
const deviceUsage = "auto (the GPU where MLX has one: Metal on a Mac, CUDA with mlx-cuda-13; else the CPU), cpu or gpu"

// deviceChoice is what the device of a run is chosen from.
type deviceChoice struct {
	flag     string // --device: "auto", "cpu" or "gpu" (aliases: cuda, metal)
	settings string // the device of the preset or checkpoint: "cpu" or "gpu"
	label    string // where the settings come from: a preset name or "resumed"
	hasGPU   bool   // this MLX build can run on a GPU
}

// chooseDevice returns the device a run uses, "cpu" or "gpu".
//
// --device cpu and --device gpu are obeyed (gpu only where MLX has one).
// With auto, the default, the settings' device is a preference: a GPU
// where MLX has one, whatever the settings say, else the CPU, except for
// settings that say gpu (the huge, mega and behemoth presets, and runs
// trained on a GPU): those need one, and on a CPU-only build auto stops
// with an error that says so instead of starting a run that would crawl;
// --device cpu runs them on the CPU all the same.
func chooseDevice(c deviceChoice) (string, error) {
	switch c.flag {
	case "cpu":
		return "cpu", nil
	case "gpu", "cuda", "metal":
		if !c.hasGPU {
			return "", usageError("invalid --device %s: this MLX build has no GPU (%s)", c.flag, noGPUHint())
		}
		return "gpu", nil
	case "auto", "":
	default:
		return "", usageError("invalid --device %s: want auto, cpu or gpu", c.flag)
	}
	if c.hasGPU {
		return "gpu", nil
	}
	if c.settings == "gpu" {
		return "", usageError("the %s needs a GPU (its device is gpu) and this MLX build has none (%s); "+
			"pass --device cpu to run it on the CPU anyway (slowly), or pick a smaller preset (posttrainllm presets)",
			settingsOf(c.label), noGPUHint())
	}
	return "cpu", nil
}

// noGPUHint says why this machine's MLX has no GPU and what would add one.
func noGPUHint() string {
	if runtime.GOOS == "darwin" {
		return "mlx-metal found no Metal device"
	}
	return "mlx-cpu is CPU only; on an NVIDIA machine, make deps MLX_BACKEND=cuda-13 installs mlx-cuda-13"
}

// pickDevice is chooseDevice on this machine's MLX. On a GPU it also
// keeps MLX's compiled kernels in the user's cache folder unless
// MLX_PTX_CACHE_DIR says where (train.UseKernelCache), before any kernel
// is compiled, so that only a machine's first process compiles them.
func pickDevice(flag, settings, label string) (string, error) {
	d, err := chooseDevice(deviceChoice{flag: flag, settings: settings, label: label, hasGPU: mlx.GPU.Available()})
	if err != nil || d != "gpu" {
		return d, err
	}
	if _, err := train.UseKernelCache(); err != nil {
		return "", err
	}
	return d, nil
}
