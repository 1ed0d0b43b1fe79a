package main

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"

	"github.com/posttrainllm/posttrainllm/mlx"
)

// version is set at build time:
//
//	go build -ldflags "-X main.version=v0.1.0" ./cmd/posttrainllm
var version = "dev"

// mlxVersion is the MLX release the bridge is built against: the version
// cmd/install-mlx pins (mlx-cpu, mlx-cuda-13 or mlx-metal wheels).
const mlxVersion = "0.32.4"

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "version",
		Short:   "Print the version of posttrainllm, Go and MLX",
		Example: "  posttrainllm version",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			w := cmd.OutOrStdout()
			fmt.Fprintf(w, "posttrainllm %s\n", buildVersion())
			fmt.Fprintf(w, "go           %s\n", runtime.Version())
			gpu := "no GPU"
			if mlx.GPU.Available() {
				gpu = "GPU available"
			}
			fmt.Fprintf(w, "mlx          %s (%s)\n", mlxVersion, gpu)
			fmt.Fprintf(w, "platform     %s/%s\n", runtime.GOOS, runtime.GOARCH)
			return nil
		},
	}
}

// buildVersion is version, with the VCS revision when the binary was built
// from a checkout and no version was set.
func buildVersion() string {
	if version != "dev" {
		return version
	}
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, s := range info.Settings {
			if s.Key == "vcs.revision" && len(s.Value) >= 12 {
				return "dev (" + s.Value[:12] + ")"
			}
		}
	}
	return version
}
