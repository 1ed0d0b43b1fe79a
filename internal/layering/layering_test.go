package layering

import (
	"encoding/json"
	"io"
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/posttrainllm/posttrainllm/"

// layers lists the module's packages from the bottom up: a package may
// import packages of lower layers, and packages of its own layer only
// within its own tree (data/chattemplate → data). A package missing here
// fails the test, so a new package has to be placed.
var layers = [][]string{
	{"internal/qos", "internal/hostheap", "internal/distenv", "internal/darwinlink", "internal/realmodel", "internal/layering", "tboard/tbpb"},
	{"mlx", "internal/pyenv"},
	{"model", "optim", "data", "tboard", "internal/mlxtest"},
	{"peft", "hf", "internal/tokentest", "internal/runtest/fixture"},
	{"generate", "checkpoint", "step"},
	{"rl"},
	{"train", "launch", "serve"},
	{"finetune", "pretrain", "internal/runtest"},
	{"runfolder"},
	{"train/bench", "presets"},
	{"cmd", "examples", "scripts"},
}

// layerOf returns the layer of package path (module-relative) and the
// root it was placed by, or -1.
func layerOf(path string) (int, string) {
	best, root := -1, ""
	for i, l := range layers {
		for _, r := range l {
			if (path == r || strings.HasPrefix(path, r+"/")) && len(r) > len(root) {
				best, root = i, r
			}
		}
	}
	return best, root
}

func TestImportsFlowOneWay(t *testing.T) {
	cmd := exec.Command("go", "list", "-json", module+"...")
	cmd.Dir = "../.."
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(out)
	n := 0
	for {
		var p struct {
			ImportPath string
			Imports    []string
		}
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		n++
		from := strings.TrimPrefix(p.ImportPath, module)
		lf, rootF := layerOf(from)
		if lf < 0 {
			t.Errorf("package %s is in no layer: place it in layering_test.go", from)
			continue
		}
		for _, imp := range p.Imports {
			if !strings.HasPrefix(imp, module) {
				continue
			}
			to := strings.TrimPrefix(imp, module)
			lt, rootT := layerOf(to)
			switch {
			case lt < 0:
				t.Errorf("%s imports %s, which is in no layer", from, to)
			case lt > lf:
				t.Errorf("%s (layer %d) imports %s (layer %d): imports must flow down", from, lf, to, lt)
			case lt == lf && rootT != rootF && lf != len(layers)-1:
				t.Errorf("%s imports %s of its own layer (%v): only a package's own tree may", from, to, layers[lf])
			}
		}
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("go list: %v", err)
	}
	if n < 20 {
		t.Fatalf("go list found %d packages, want the whole module", n)
	}
}
