// Command install-mlx installs the MLX library that posttrainllm's cgo bridge
// (package mlx) compiles and links against, and writes the pkg-config file
// through which cgo finds it.
//
// A program that imports posttrainllm's packages needs it once per user:
//
//	go run github.com/posttrainllm/posttrainllm/cmd/install-mlx@latest
//	export PKG_CONFIG_PATH="$HOME/.local/share/posttrainllm/mlx/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
//
// The repository's own build runs it as `make deps` (prefix .deps).
//
// It installs the pinned MLX wheel from PyPI with pip (pip --target only
// fetches and unpacks it; no Python environment changes): mlx-cpu on Linux,
// mlx-metal on Apple silicon, and with -backend cuda-13 mlx-cuda-13 with
// the CUDA libraries it loads (several GB). With mlx-cpu it also routes the
// wheel's reference BLAS to OpenBLAS (see blas.go). Under the prefix it
// writes
//
//	mlx/        the wheel (headers in mlx/mlx/include, libmlx in mlx/mlx/lib)
//	blas/       scipy-openblas32 (Linux, cpu backend)
//	pkgconfig/  posttrainllm-mlx.pc
//
// Go's build cache does not see pkg-config's output (golang/go#24544): a
// program built against one prefix keeps that prefix's paths in its cached
// build of package mlx, so after moving to another prefix run
// `go clean -cache` once.
//
// -platform darwin/arm64 installs the macOS wheel on another machine (pip
// --platform), for cross-building the macOS binaries; make cross-darwin
// uses it on Linux.
//
// Running it again is cheap: what is installed at the pinned versions is
// left alone, and a different version is replaced.
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
)

// The pinned versions. The bridge is written against this MLX version's C++
// API, so the version is part of posttrainllm's source, not a setting.
const (
	mlxVersion      = "0.32.4"
	openblasVersion = "0.3.34.481.3"
	pcName          = "posttrainllm-mlx"
)

// options is one installation, after flag checks.
type options struct {
	prefix  string // absolute
	backend string // a key of wheels
	blas    string // "openblas" or "reference"; used by the cpu backend only
	python  string // interpreter with pip; "" finds python3 or python
	// goos and goarch are the platform the install is for: this machine's,
	// or with -platform another one whose wheel pip fetches by its tag.
	goos, goarch string
}

// pipPlatforms maps the platforms that can be installed from another
// machine to pip's platform tag of their wheel.
var pipPlatforms = map[string]string{
	"darwin/arm64": "macosx_14_0_arm64",
}

// cross reports whether the install is for another platform than the
// installer's.
func (o options) cross() bool { return o.goos != runtime.GOOS || o.goarch != runtime.GOARCH }

// wheels maps a backend to its PyPI package.
var wheels = map[string]string{
	"cpu":     "mlx-cpu",
	"cuda-13": "mlx-cuda-13",
	"metal":   "mlx-metal",
}

// backends lists the backends that have an MLX wheel for goos/goarch, the
// default first.
func backends(goos, goarch string) []string {
	switch {
	case goos == "linux":
		return []string{"cpu", "cuda-13"}
	case goos == "darwin" && goarch == "arm64":
		return []string{"metal"}
	}
	return nil
}

// libName is libmlx's file name in the wheel's mlx/lib.
func libName(goos string) string {
	if goos == "darwin" {
		return "libmlx.dylib"
	}
	return "libmlx.so"
}

func main() {
	err := run(os.Args[1:], os.Stdout, os.Stderr)
	switch {
	case errors.Is(err, flag.ErrHelp):
		os.Exit(0)
	case errors.Is(err, errUsage): // the flag package has printed it
		os.Exit(2)
	case err != nil:
		fmt.Fprintln(os.Stderr, "install-mlx:", err)
		os.Exit(1)
	}
}

func run(args []string, stdout, stderr io.Writer) error {
	o, err := parseFlags(args, runtime.GOOS, runtime.GOARCH, stderr)
	if err != nil {
		return err
	}
	if err := installMLX(o, stdout); err != nil {
		return err
	}
	if o.backend == "cpu" && !o.cross() {
		if err := routeBLAS(o, stdout, stderr); err != nil {
			return err
		}
	}
	pc, err := writePC(o)
	if err != nil {
		return err
	}
	return reportPC(o, pc, stdout, stderr)
}

// defaultPrefix is the per-user data folder, outside any module cache and
// checkout: $XDG_DATA_HOME/posttrainllm/mlx, else
// ~/.local/share/posttrainllm/mlx.
func defaultPrefix() string {
	if d := os.Getenv("XDG_DATA_HOME"); filepath.IsAbs(d) {
		return filepath.Join(d, "posttrainllm", "mlx")
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return ""
	}
	return filepath.Join(home, ".local", "share", "posttrainllm", "mlx")
}

// errUsage marks a command line the flag package rejected.
var errUsage = errors.New("usage")

func parseFlags(args []string, goos, goarch string, stderr io.Writer) (options, error) {
	host := goos + "/" + goarch
	fs := flag.NewFlagSet("install-mlx", flag.ContinueOnError)
	fs.SetOutput(stderr)
	prefix := fs.String("prefix", defaultPrefix(), "install `dir`ectory; its pkgconfig folder goes on PKG_CONFIG_PATH")
	platform := fs.String("platform", host, "`goos/goarch` the install is for: this machine's, or darwin/arm64 (to cross-build for macOS)")
	backend := fs.String("backend", "", "MLX backend: cpu or cuda-13 on Linux, metal on macOS (default: the first)")
	blas := fs.String("blas", "openblas", "BLAS of the cpu backend: openblas, or reference (the wheel's own, slow)")
	python := fs.String("python", "", "Python `interpreter` whose pip fetches the wheels (default python3, else python)")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: install-mlx [flags]\n\n"+
			"Installs MLX %s for posttrainllm's cgo bridge and writes %s.pc for pkg-config.\n\n", mlxVersion, pcName)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return options{}, err
		}
		return options{}, fmt.Errorf("%w: %v", errUsage, err)
	}
	if fs.NArg() > 0 {
		return options{}, fmt.Errorf("unexpected argument %q (flags only; see -h)", fs.Arg(0))
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })

	tgoos, tgoarch, _ := strings.Cut(*platform, "/")
	have := backends(tgoos, tgoarch)
	if len(have) == 0 {
		return options{}, fmt.Errorf("MLX publishes no wheel for %s (Linux, or macOS on Apple silicon)", *platform)
	}
	if *platform != host && pipPlatforms[*platform] == "" {
		return options{}, fmt.Errorf("-platform %s: from %s, only the wheel of darwin/arm64 can be installed (or this machine's own)", *platform, host)
	}
	if !set["backend"] {
		*backend = have[0]
	}
	o := options{backend: *backend, blas: *blas, python: *python, goos: tgoos, goarch: tgoarch}
	if !slices.Contains(have, o.backend) {
		return options{}, fmt.Errorf("-backend %q: want %s on %s", o.backend, strings.Join(have, " or "), *platform)
	}
	if o.blas != "openblas" && o.blas != "reference" {
		return options{}, fmt.Errorf("-blas %q: want openblas or reference", o.blas)
	}
	if set["blas"] && o.backend != "cpu" {
		return options{}, fmt.Errorf("-blas %q applies to the cpu backend only, not %q", o.blas, o.backend)
	}
	if *prefix == "" {
		return options{}, errors.New("-prefix is empty (and no home directory for the default)")
	}
	p, err := filepath.Abs(*prefix)
	if err != nil {
		return options{}, fmt.Errorf("-prefix %q: %v", *prefix, err)
	}
	// cgo accepts -Wl,-rpath,DIR from pkg-config only when DIR has no
	// comma, and a colon would split the folder on PKG_CONFIG_PATH.
	if strings.ContainsAny(p, ",:\n") {
		return options{}, fmt.Errorf("-prefix %q: the path may not contain a comma, colon or newline (cgo's -Wl,-rpath check and PKG_CONFIG_PATH refuse them)", *prefix)
	}
	o.prefix = p
	return o, nil
}

// The folders under a prefix.
func (o options) mlxDir() string  { return filepath.Join(o.prefix, "mlx") }
func (o options) blasDir() string { return filepath.Join(o.prefix, "blas") }
func (o options) pcDir() string   { return filepath.Join(o.prefix, "pkgconfig") }

// want is the pip requirement of the MLX wheel.
func (o options) want() string { return wheels[o.backend] + "==" + mlxVersion }

// stampFile, in an install folder, holds the requirement pip installed
// there; it is written last, so a folder with a matching stamp is complete.
const stampFile = ".installed"

func readStamp(dir string) string {
	b, err := os.ReadFile(filepath.Join(dir, stampFile))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// mlxInstalled reports whether the prefix holds the wanted wheel.
func mlxInstalled(o options) bool {
	_, err := os.Stat(filepath.Join(o.mlxDir(), "mlx", "lib", libName(o.goos)))
	return err == nil && readStamp(o.mlxDir()) == o.want()
}

func installMLX(o options, stdout io.Writer) error {
	want, dest := o.want(), o.mlxDir()
	if mlxInstalled(o) {
		fmt.Fprintf(stdout, "MLX: %s already installed in %s\n", want, dest)
		return nil
	}
	fmt.Fprintf(stdout, "MLX: installing %s into %s\n", want, dest)
	// The CUDA wheel's libmlx finds cuDNN, cuBLAS and NCCL through its rpath
	// in the nvidia/ folders that pip installs beside it, so that backend
	// brings its dependencies; the others have none.
	tmp, err := pipInstall(o, want, dest, o.backend == "cuda-13")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	dist := strings.ReplaceAll(wheels[o.backend], "-", "_") + "-" + mlxVersion + ".dist-info"
	if got := metadataVersion(filepath.Join(tmp, dist, "METADATA")); got != mlxVersion {
		return fmt.Errorf("pip installed %s version %q, want %s", wheels[o.backend], got, mlxVersion)
	}
	for _, f := range []string{filepath.Join("mlx", "lib", libName(o.goos)), filepath.Join("mlx", "include", "mlx", "mlx.h")} {
		if _, err := os.Stat(filepath.Join(tmp, f)); err != nil {
			return fmt.Errorf("%s carries no %s", want, f)
		}
	}
	if err := replaceDir(tmp, dest, want); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "MLX: %s installed\n", want)
	return nil
}

// pipInstall installs requirement into a new temporary folder beside dest
// (same file system, so replaceDir's rename is atomic) and returns it.
func pipInstall(o options, requirement, dest string, deps bool) (string, error) {
	python, err := findPython(o.python)
	if err != nil {
		return "", fmt.Errorf("%v: pip is needed to fetch %s", err, requirement)
	}
	if err := os.MkdirAll(filepath.Dir(dest), 0o755); err != nil {
		return "", err
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dest), "."+filepath.Base(dest)+".install-")
	if err != nil {
		return "", err
	}
	args := []string{"-m", "pip", "install", "--quiet", "--no-compile", "--only-binary=:all:", "--target", tmp}
	if !deps {
		args = append(args, "--no-deps")
	}
	if o.cross() {
		// pip fetches the wheel built for the other platform; with
		// --only-binary it installs it without running anything of it.
		args = append(args, "--platform", pipPlatforms[o.goos+"/"+o.goarch])
	}
	cmd := exec.Command(python, append(args, requirement)...)
	cmd.Env = append(os.Environ(), "PIP_DISABLE_PIP_VERSION_CHECK=1", "PIP_ROOT_USER_ACTION=ignore")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		os.RemoveAll(tmp)
		return "", fmt.Errorf("%s -m pip install %s: %v", python, requirement, err)
	}
	return tmp, nil
}

// findPython returns an interpreter whose pip works.
func findPython(flagValue string) (string, error) {
	candidates := []string{"python3", "python"}
	if flagValue != "" {
		candidates = []string{flagValue}
	}
	for _, c := range candidates {
		p, err := exec.LookPath(c)
		if err != nil {
			continue
		}
		if err := exec.Command(p, "-m", "pip", "--version").Run(); err != nil {
			return "", fmt.Errorf("'%s -m pip' does not run; install pip for %s", p, p)
		}
		return p, nil
	}
	if flagValue != "" {
		return "", fmt.Errorf("-python %q: not found", flagValue)
	}
	return "", errors.New("neither python3 nor python is on PATH")
}

// metadataVersion reads the Version field of a wheel's METADATA file.
func metadataVersion(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "Version: "); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// replaceDir stamps the complete install in tmp and moves it to dest.
func replaceDir(tmp, dest, stamp string) error {
	if err := os.WriteFile(filepath.Join(tmp, stampFile), []byte(stamp+"\n"), 0o644); err != nil {
		return err
	}
	if err := os.RemoveAll(dest); err != nil {
		return err
	}
	return os.Rename(tmp, dest)
}

// pcText is the pkg-config file. Paths are relative to the file's own
// folder (${pcfiledir}), so a prefix (a checkout's .deps) keeps working
// after it moves; pkg-config prints them absolute when PKG_CONFIG_PATH is.
// It describes MLX only: the C++ runtime library is cgo.go's business.
func pcText(o options) string {
	return fmt.Sprintf(`# MLX for posttrainllm's cgo bridge (package mlx), written by
# github.com/posttrainllm/posttrainllm/cmd/install-mlx.
prefix=${pcfiledir}/..
libdir=${prefix}/mlx/mlx/lib
includedir=${prefix}/mlx/mlx/include

Name: %s
Description: MLX %s (%s wheel)
Version: %s
Cflags: -I${includedir}
Libs: -L${libdir} -lmlx -Wl,-rpath,${libdir}
`, pcName, mlxVersion, wheels[o.backend], mlxVersion)
}

// writePC writes the .pc file unless it already says the same, and returns
// its path.
func writePC(o options) (string, error) {
	path := filepath.Join(o.pcDir(), pcName+".pc")
	text := []byte(pcText(o))
	if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, text) {
		return path, nil
	}
	if err := os.MkdirAll(o.pcDir(), 0o755); err != nil {
		return "", err
	}
	return path, writeFileAtomic(path, text, 0o644)
}

// writeFileAtomic writes data to a temporary file beside path and renames
// it over path, so readers see the old or the new file, never a part.
func writeFileAtomic(path string, data []byte, perm os.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Chmod(perm); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

// reportPC checks that pkg-config reads the .pc file and, unless
// PKG_CONFIG_PATH already has its folder, prints the line that adds it.
func reportPC(o options, pc string, stdout, stderr io.Writer) error {
	dir := filepath.Dir(pc)
	if _, err := exec.LookPath("pkg-config"); err != nil {
		fmt.Fprintf(stderr, "install-mlx: pkg-config is not on PATH; cgo needs it to find MLX (install pkg-config or pkgconf)\n")
	} else {
		cmd := exec.Command("pkg-config", "--cflags", "--libs", pcName)
		cmd.Env = append(os.Environ(), "PKG_CONFIG_PATH="+dir)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("pkg-config cannot read %s: %v\n%s", pc, err, out)
		}
	}
	if o.cross() {
		// For cross-builds, which put the folder on PKG_CONFIG_PATH
		// themselves: no shell profile should.
		fmt.Fprintf(stdout, "pkg-config: %s.pc for %s/%s builds in %s\n", pcName, o.goos, o.goarch, dir)
		return nil
	}
	if onPath(os.Getenv("PKG_CONFIG_PATH"), dir) {
		fmt.Fprintf(stdout, "pkg-config: %s.pc in %s\n", pcName, dir)
		return nil
	}
	fmt.Fprintf(stdout, "\nMLX is ready. For go build to find it, add this line to your shell profile\n"+
		"(~/.bashrc, ~/.zshrc) and run it in this shell:\n\n  %s\n\n", exportLine(dir))
	return nil
}

// onPath reports whether the colon-separated list has dir.
func onPath(list, dir string) bool {
	for _, d := range filepath.SplitList(list) {
		if d != "" && filepath.Clean(d) == dir {
			return true
		}
	}
	return false
}

// exportLine is the shell line that puts dir first on PKG_CONFIG_PATH,
// with $HOME for the home folder so that it reads like one written by hand.
func exportLine(dir string) string {
	const tail = "${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
	safe := func(s string) bool {
		return strings.IndexFunc(s, func(r rune) bool {
			return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("/._-+@%=", r))
		}) < 0
	}
	if home, err := os.UserHomeDir(); err == nil && filepath.IsAbs(home) && home != "/" && safe(home) {
		if rest, ok := strings.CutPrefix(dir, home+"/"); ok && safe(rest) {
			return `export PKG_CONFIG_PATH="$HOME/` + rest + tail + `"`
		}
	}
	if safe(dir) {
		return `export PKG_CONFIG_PATH="` + dir + tail + `"`
	}
	return "export PKG_CONFIG_PATH='" + strings.ReplaceAll(dir, "'", `'\''`) + `'"` + tail + `"`
}
