package train

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// A program that imports train does not link a plotting library, nor the
// command line's: plots, flags and terminals belong to cmd/posttrainllm.
func TestTrainDependsOnNoPlottingLibrary(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	deps := strings.Fields(string(out))
	if !slices.Contains(deps, "github.com/posttrainllm/posttrainllm/mlx") {
		t.Fatalf("go list -deps of train lacks the mlx package; the listing is not what the test expects:\n%s", out)
	}
	for _, d := range deps {
		for _, banned := range []string{"gonum.org/v1/plot", "github.com/spf13/cobra", "github.com/schollz/progressbar"} {
			if strings.HasPrefix(d, banned) {
				t.Errorf("train depends on %s", d)
			}
		}
	}
}
