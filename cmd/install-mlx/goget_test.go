package main

import (
	"archive/zip"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"math"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// gogetVersion is the version the test's proxy serves: a pre-release, so
// @latest picks it with no release beside it, and no real one.
const gogetVersion = "v0.0.0-gogettest"

// TestGoGet builds a program that imports posttrainllm the way a user's
// `go get` delivers it: from a module zip of the git-tracked files (what a
// module proxy serves for a commit, without git-ignored files such as
// .deps), through a file:// GOPROXY, in a module of its own with its own
// GOENV. It follows the README's library section: install-mlx@latest,
// PKG_CONFIG_PATH on the printed folder, go get, go build (-mod=mod for go
// mod tidy), run.
//
// The installer's prefix is a copy of the MLX install this test run uses
// (found through pkg-config, as the repository's build finds it) whose
// folders are links into it, so install-mlx finds everything in place and
// installs nothing; its stamps are copies, so nothing it might write
// reaches the real install.
func TestGoGet(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the cgo bridge from a module zip (about a minute)")
	}
	root, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Skipf("not in a git checkout (%v): no tracked files to zip", err)
	}
	repo := strings.TrimSpace(string(root))
	tmp := t.TempDir()
	started := time.Now()
	step := func(name string) {
		t.Logf("%-28s %5.1fs", name, time.Since(started).Seconds())
	}

	real := mlxInstallOfThisRun(t)
	backend, blas := installFlags(t, real)
	prefix := filepath.Join(tmp, "mlx")
	linkInstall(t, real, prefix)

	modPath := modulePath(t, repo)
	proxy := filepath.Join(tmp, "proxy")
	writeProxy(t, repo, modPath, proxy)
	step("module zip and proxy")

	parent := goEnv(t, "GOCACHE", "GOMODCACHE", "GOPROXY")
	goenv := filepath.Join(tmp, "go.env")
	if err := os.WriteFile(goenv, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	env := cleanEnv(os.Environ(),
		"GOENV="+goenv,
		"GOPATH="+filepath.Join(tmp, "gopath"),
		"GOMODCACHE="+filepath.Join(tmp, "gopath", "pkg", "mod"),
		// -mod=mod stands in for the README's go mod tidy: it adds the
		// same requirements but loads only the modules the build needs,
		// which the module cache of this test run holds (tidy also fetches
		// the go.mod files of the whole graph). -trimpath keeps the
		// temporary module cache's path out of the build cache's keys, so
		// the dependencies come compiled from this run's build cache;
		// -modcacherw lets t.TempDir remove the module cache.
		"GOCACHE="+parent["GOCACHE"],
		"GOFLAGS=-mod=mod -modcacherw -trimpath",
		// The test's proxy first; the dependencies from the module cache
		// this test run built with (a module cache's download folder is a
		// proxy), else from the real proxy.
		"GOPROXY=file://"+filepath.ToSlash(proxy)+",file://"+filepath.ToSlash(filepath.Join(parent["GOMODCACHE"], "cache", "download"))+","+parent["GOPROXY"],
		// The test's version is in no checksum database, and sum.golang.org
		// need not be reachable: the dependencies' hashes come from the
		// repository's go.sum, copied into the user's module below.
		"GONOSUMDB="+modPath,
		"GOTOOLCHAIN=local",
		"GOWORK=off",
		"CGO_ENABLED=1",
	)

	// 1. The installer, run from the proxy: it builds before MLX exists (no
	// cgo), installs nothing here and writes the .pc file.
	work := filepath.Join(tmp, "work")
	if err := os.Mkdir(work, 0o755); err != nil {
		t.Fatal(err)
	}
	args := []string{"run", modPath + "/cmd/install-mlx@latest", "-prefix", prefix, "-backend", backend}
	if backend == "cpu" {
		args = append(args, "-blas", blas)
	}
	out := goCmd(t, work, env, args...)
	if strings.Contains(out, "installing") || !strings.Contains(out, "already installed") {
		t.Fatalf("install-mlx over a complete install installed something:\n%s", out)
	}
	if !strings.Contains(out, "export PKG_CONFIG_PATH=") {
		t.Errorf("install-mlx printed no export line:\n%s", out)
	}
	if _, err := os.Stat(filepath.Join(prefix, "pkgconfig", pcName+".pc")); err != nil {
		t.Fatal(err)
	}
	step("go run install-mlx@latest")

	// 2. go get and go build in a module of the user's own.
	user := filepath.Join(tmp, "user")
	if err := os.Mkdir(user, 0o755); err != nil {
		t.Fatal(err)
	}
	sum, err := os.ReadFile(filepath.Join(repo, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{
		"go.mod":  []byte("module example.com/gogettest\n\ngo 1.26\n"),
		"go.sum":  sum,
		"main.go": []byte(userProgram),
	} {
		if err := os.WriteFile(filepath.Join(user, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	goCmd(t, user, env, "get", modPath)
	if mod, _ := os.ReadFile(filepath.Join(user, "go.mod")); !strings.Contains(string(mod), modPath+" "+gogetVersion) {
		t.Fatalf("go get did not require %s %s:\n%s", modPath, gogetVersion, mod)
	}
	step("go get")
	bin := filepath.Join(tmp, "gogettest")
	// Go's build cache keys a cgo package by its #cgo lines and CGO_*
	// variables but not by pkg-config's output (golang/go#24544), so a
	// bridge cached by an earlier run would link against that run's deleted
	// prefix. A define unique to this run makes the bridge compile here, as
	// on a user's first build.
	goCmd(t, user, append(env, "PKG_CONFIG_PATH="+filepath.Join(prefix, "pkgconfig"),
		"CGO_CPPFLAGS=-DPTLM_GOGET_TEST="+strconv.FormatInt(time.Now().UnixNano(), 36)),
		"build", "-o", bin, ".")
	step("go build")

	// 3. The program finds libmlx through its rpath.
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin)
	cmd.Env = cleanEnv(os.Environ())
	b, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", bin, err, b)
	}
	m := regexp.MustCompile(`(?m)^loss (\S+) traces 1 tokens (\S+)$`).FindStringSubmatch(string(b))
	if m == nil {
		t.Fatalf("want a line \"loss X traces 1 tokens N\", got:\n%s", b)
	}
	if m[2] != "120" { // 0 + 1 + … + 15: the batch's 16 input tokens
		t.Fatalf("tokens %s summed by mlx on the program's goroutine, want 120", m[2])
	}
	// A freshly initialised model predicts about uniformly: ln(vocab).
	loss, err := strconv.ParseFloat(m[1], 64)
	if err != nil || math.IsNaN(loss) || math.Abs(loss-math.Log(32)) > 1 {
		t.Fatalf("loss %q, want about ln(32) = %.2f", m[1], math.Log(32))
	}
	step("run")
}

// userProgram is the user's program: one compiled AdamW step of a tiny
// Transformer on fixed tokens, through mlx, model, optim, step and train.
const userProgram = `package main

import (
	"fmt"
	"os"

	"github.com/posttrainllm/posttrainllm/mlx"
	"github.com/posttrainllm/posttrainllm/model"
	"github.com/posttrainllm/posttrainllm/optim"
	"github.com/posttrainllm/posttrainllm/step"
	"github.com/posttrainllm/posttrainllm/train"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run() error {
	const vocab, context, batch = 32, 8, 2
	m, err := model.New(model.Config{VocabSize: vocab, DModel: 32, Layers: 1, Heads: 2, Context: context})
	if err != nil {
		return err
	}
	opt, err := optim.New("adamw", train.OptimizerParams(m.Specs), optim.DefaultConfig())
	if err != nil {
		return err
	}
	update, err := step.NewStep(step.MeanLoss(m.Loss), opt, step.Layout{Trainable: len(m.Specs), State: len(opt.StateNames())}, step.StepOptions{Accum: 1, Compile: true})
	if err != nil {
		return err
	}
	defer update.Free()
	state, err := step.InitState(update, m, 1)
	if err != nil {
		return err
	}
	defer state.Free()
	b := step.Batch{X: make([]int32, batch*context), Y: make([]int32, batch*context), N: 1, B: batch, T: context}
	for i := range b.X {
		b.X[i], b.Y[i] = int32(i%vocab), int32((i+1)%vocab)
	}
	loss, err := state.Update(1e-3, b)
	if err != nil {
		return err
	}
	// Plain mlx calls from this goroutine work too.
	sum, err := mlx.Sum(mlx.FromSlice(b.X)).Item()
	if err != nil {
		return err
	}
	fmt.Printf("loss %.4f traces %d tokens %.0f\n", loss, update.Traces(), sum)
	return nil
}
`

// mlxInstallOfThisRun is the prefix of the MLX install that pkg-config
// finds for this test run: the repository's .deps under make.
func mlxInstallOfThisRun(t *testing.T) string {
	out, err := exec.Command("pkg-config", "--variable=prefix", pcName).CombinedOutput()
	if err != nil {
		t.Fatalf("pkg-config finds no %s (%v): run make deps, or export PKG_CONFIG_PATH=\"$PWD/.deps/pkgconfig\" in the repository\n%s", pcName, err, out)
	}
	return filepath.Clean(strings.TrimSpace(string(out)))
}

// installFlags returns the -backend and -blas that match the install at
// prefix, so that install-mlx finds nothing to do there.
func installFlags(t *testing.T, prefix string) (backend, blas string) {
	stamp := readStamp(filepath.Join(prefix, "mlx"))
	for b, wheel := range wheels {
		if stamp == wheel+"=="+mlxVersion {
			backend = b
		}
	}
	if backend == "" {
		t.Fatalf("%s holds %q, not MLX %s from cmd/install-mlx: run make deps", prefix, stamp, mlxVersion)
	}
	blas = "reference"
	if b, err := os.ReadFile(filepath.Join(prefix, "mlx", blasStamp)); err == nil && len(bytes.TrimSpace(b)) > 0 {
		blas = "openblas"
	}
	return backend, blas
}

// linkInstall makes prefix a copy of the install at real: the stamps are
// copied, the wheel's libraries folder gets a link per file (the BLAS step
// renames and writes there), and everything else is a link.
func linkInstall(t *testing.T, real, prefix string) {
	mlxDir := filepath.Join(prefix, "mlx")
	if err := os.MkdirAll(mlxDir, 0o755); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(filepath.Join(real, "mlx"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		src, dst := filepath.Join(real, "mlx", e.Name()), filepath.Join(mlxDir, e.Name())
		switch {
		case e.Type().IsRegular():
			b, err := os.ReadFile(src)
			if err == nil {
				err = os.WriteFile(dst, b, 0o644)
			}
			if err != nil {
				t.Fatal(err)
			}
		case e.IsDir() && strings.HasSuffix(e.Name(), ".libs"):
			libs, err := os.ReadDir(src)
			if err == nil {
				err = os.Mkdir(dst, 0o755)
			}
			for _, l := range libs {
				if err == nil {
					err = os.Symlink(filepath.Join(src, l.Name()), filepath.Join(dst, l.Name()))
				}
			}
			if err != nil {
				t.Fatal(err)
			}
		default:
			if err := os.Symlink(src, dst); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := os.Stat(filepath.Join(real, "blas")); err == nil {
		if err := os.Symlink(filepath.Join(real, "blas"), filepath.Join(prefix, "blas")); err != nil {
			t.Fatal(err)
		}
	}
}

// modulePath reads the module line of the repository's go.mod.
func modulePath(t *testing.T, repo string) string {
	b, err := os.ReadFile(filepath.Join(repo, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^module\s+(\S+)\s*$`).FindSubmatch(b)
	if m == nil {
		t.Fatal("go.mod has no module line")
	}
	return string(m[1])
}

// writeProxy lays out a file:// module proxy serving one version of the
// module: the git-tracked files as they are in the working tree.
func writeProxy(t *testing.T, repo, modPath, proxy string) {
	if strings.ToLower(modPath) != modPath {
		t.Fatalf("module path %s has capitals: the proxy layout would need Go's case escaping", modPath)
	}
	dir := filepath.Join(proxy, filepath.FromSlash(modPath), "@v")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	gomod, err := os.ReadFile(filepath.Join(repo, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	info, _ := json.Marshal(map[string]string{"Version": gogetVersion, "Time": time.Now().UTC().Format(time.RFC3339)})
	var zipped bytes.Buffer
	n := moduleZip(t, repo, modPath+"@"+gogetVersion, &zipped)
	for name, data := range map[string][]byte{
		"list":                 []byte(gogetVersion + "\n"),
		gogetVersion + ".info": info,
		gogetVersion + ".mod":  gomod,
		gogetVersion + ".zip":  zipped.Bytes(),
	} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("module zip: %d files, %d KiB", n, zipped.Len()>>10)
}

// moduleZip writes the module zip of the git-tracked files under prefix
// (module@version) with Go's exclusions: files of nested modules (folders
// with their own go.mod) and vendored packages, and anything but regular
// files. The go command checks the rest (path syntax, case collisions,
// sizes) when it extracts the zip. It returns the number of files.
func moduleZip(t *testing.T, repo, prefix string, w io.Writer) int {
	out, err := exec.Command("git", "-C", repo, "ls-files", "-z").Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	files := strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00")
	nested := map[string]bool{}
	for _, f := range files {
		if path.Base(f) == "go.mod" && path.Dir(f) != "." {
			nested[path.Dir(f)] = true
		}
	}
	inNested := func(f string) bool {
		for d := path.Dir(f); d != "."; d = path.Dir(d) {
			if nested[d] {
				return true
			}
		}
		return false
	}
	zw := zip.NewWriter(w)
	n := 0
	for _, f := range files {
		if inNested(f) || f == "vendor" || strings.HasPrefix(f, "vendor/") || strings.Contains(f, "/vendor/") {
			continue
		}
		fi, err := os.Lstat(filepath.Join(repo, filepath.FromSlash(f)))
		if os.IsNotExist(err) {
			continue // deleted in the working tree
		}
		if err != nil {
			t.Fatal(err)
		}
		if !fi.Mode().IsRegular() {
			continue
		}
		data, err := os.ReadFile(filepath.Join(repo, filepath.FromSlash(f)))
		if err != nil {
			t.Fatal(err)
		}
		fw, err := zw.Create(prefix + "/" + f)
		if err == nil {
			_, err = fw.Write(data)
		}
		if err != nil {
			t.Fatal(err)
		}
		n++
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return n
}

// goEnv reads go env values of this test run.
func goEnv(t *testing.T, names ...string) map[string]string {
	out, err := exec.Command("go", append([]string{"env", "-json"}, names...)...).Output()
	if err != nil {
		t.Fatalf("go env: %v", err)
	}
	m := map[string]string{}
	if err := json.Unmarshal(out, &m); err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if m[n] == "" {
			t.Fatalf("go env %s is empty", n)
		}
	}
	return m
}

// cleanEnv is env without the settings through which this test run's Go
// configuration, MLX flags or library path could reach the user's build,
// plus set.
func cleanEnv(env []string, set ...string) []string {
	drop := map[string]bool{}
	for _, k := range strings.Fields(`GOENV GOFLAGS GOPROXY GONOPROXY GONOSUMDB GONOSUMCHECK GOPRIVATE
		GOSUMDB GOINSECURE GOPATH GOMODCACHE GOCACHE GOWORK GO111MODULE GOTOOLCHAIN CGO_ENABLED
		CGO_CFLAGS CGO_CPPFLAGS CGO_CXXFLAGS CGO_LDFLAGS PKG_CONFIG_PATH LD_LIBRARY_PATH`) {
		drop[k] = true
	}
	var out []string
	for _, kv := range env {
		if k, _, _ := strings.Cut(kv, "="); !drop[k] {
			out = append(out, kv)
		}
	}
	return append(out, set...)
}

// goCmd runs the go command in dir and returns its combined output.
func goCmd(t *testing.T, dir string, env []string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir, cmd.Env = dir, env
	b, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, b)
	}
	return string(b)
}
