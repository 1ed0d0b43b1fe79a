package tboard

import (
	"os/exec"
	"strings"
	"testing"
)

// The package stands alone: no MLX (no cgo), nothing of posttrainllm but
// its generated protos, so a program that only writes event files builds
// without MLX installed.
func TestDependsOnNoOtherPackageOfTheProject(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	deps := strings.Fields(string(out))
	found := false
	for _, d := range deps {
		switch {
		case d == "google.golang.org/protobuf/proto":
			found = true
		case strings.HasPrefix(d, "github.com/posttrainllm/posttrainllm/") &&
			d != "github.com/posttrainllm/posttrainllm/tboard" && d != "github.com/posttrainllm/posttrainllm/tboard/tbpb":
			t.Errorf("tboard depends on %s", d)
		case d == "runtime/cgo":
			t.Errorf("tboard needs cgo")
		}
	}
	if !found {
		t.Fatalf("go list -deps lacks google.golang.org/protobuf/proto; the listing is not what the test expects:\n%s", out)
	}
}
