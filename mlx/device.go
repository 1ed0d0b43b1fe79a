package mlx

/*
#include "bridge.h"
*/
import "C"

import "fmt"

// Device is where MLX runs operations.
type Device int

// The devices MLX offers; GPU is CUDA on Linux builds of MLX.
const (
	CPU Device = C.PTLM_CPU
	GPU Device = C.PTLM_GPU
)

// String returns "cpu" or "gpu", the names ParseDevice accepts.
func (d Device) String() string {
	if d == GPU {
		return "gpu"
	}
	return "cpu"
}

// ParseDevice maps "cpu" or "gpu" to a Device.
func ParseDevice(name string) (Device, error) {
	switch name {
	case "cpu":
		return CPU, nil
	case "gpu", "cuda":
		return GPU, nil
	}
	return CPU, fmt.Errorf("unknown device %q: want cpu or gpu", name)
}

// Available reports whether this MLX build can run on d.
func (d Device) Available() bool {
	var ok C.bool
	if _, err := call(func() C.int { return C.ptlm_device_available(C.int(d), &ok) }); err != nil {
		return false
	}
	return bool(ok)
}

// Memory returns the device's total memory in bytes as MLX reports it, or
// 0 when MLX does not say, as for the CPU in MLX 0.32 (whose memory is the
// host's RAM).
func (d Device) Memory() (uint64, error) {
	var n C.size_t
	_, err := call(func() C.int { return C.ptlm_device_memory(C.int(d), &n) })
	if err != nil {
		return 0, check("device_info", err)
	}
	return uint64(n), nil
}

// SetDefaultDevice makes d the device of later operations (MLX keeps the
// default device per thread; it is set on the MLX thread, which runs them all).
func SetDefaultDevice(d Device) error {
	if !d.Available() {
		return fmt.Errorf("mlx: device %s is not available in this MLX build (libmlx from mlx-cpu has no GPU; install mlx-cuda-13)", d)
	}
	_, err := call(func() C.int { return C.ptlm_set_default_device(C.int(d)) })
	return check("set_default_device", err)
}

// DefaultDevice returns the device of later operations.
func DefaultDevice() Device {
	var t C.int
	// Called directly first, like unary: BenchmarkCgoRoundTrip times it as
	// the bare cost of one bridge call.
	if rc := C.ptlm_get_default_device(&t); rc != C.PTLM_OK {
		finish(rc, func() C.int { return C.ptlm_get_default_device(&t) })
	}
	return Device(t)
}

// Synchronize waits for all scheduled work on the default stream to finish.
func Synchronize() error {
	_, err := call(func() C.int { return C.ptlm_synchronize() })
	return check("synchronize", err)
}

// UseDevice parses a device name ("cpu" or "gpu") and makes it the default
// device: what every command that takes --device does.
func UseDevice(name string) error {
	d, err := ParseDevice(name)
	if err != nil {
		return err
	}
	return SetDefaultDevice(d)
}
