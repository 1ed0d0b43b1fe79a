package main

import (
	"errors"
	"fmt"
	"os"
	"runtime/pprof"
)

// withCPUProfile runs run while Go's CPU profiler writes to path (bench
// --cpuprofile), for `go tool pprof`: time the MLX thread spends inside
// a C call (building, launching or waiting for MLX's work) is counted at
// the Go call that made it. An empty path runs run alone. An existing
// file is refused rather than overwritten.
func withCPUProfile(path string, run func() error) (err error) {
	if path == "" {
		return run()
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if errors.Is(err, os.ErrExist) {
		return usageError("invalid --cpuprofile %s: the file exists; name a new file", path)
	}
	if err != nil {
		return fmt.Errorf("--cpuprofile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return fmt.Errorf("--cpuprofile %s: %w", path, err)
	}
	defer func() {
		pprof.StopCPUProfile()
		if cerr := f.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("--cpuprofile %s: %w", path, cerr)
		}
	}()
	return run()
}
