package main

import (
	"bytes"
	"errors"
	"flag"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

func TestParseFlags(t *testing.T) {
	t.Setenv("XDG_DATA_HOME", "/data")
	for _, c := range []struct {
		goos, goarch string
		args         []string
		want         options
	}{
		{"linux", "amd64", nil, options{prefix: "/data/posttrainllm/mlx", backend: "cpu", blas: "openblas", goos: "linux", goarch: "amd64"}},
		{"linux", "arm64", []string{"-backend", "cuda-13", "-prefix", "/x/.deps"}, options{prefix: "/x/.deps", backend: "cuda-13", blas: "openblas", goos: "linux", goarch: "arm64"}},
		{"linux", "amd64", []string{"-blas", "reference", "-python", "/usr/bin/python3.12"}, options{prefix: "/data/posttrainllm/mlx", backend: "cpu", blas: "reference", python: "/usr/bin/python3.12", goos: "linux", goarch: "amd64"}},
		{"darwin", "arm64", nil, options{prefix: "/data/posttrainllm/mlx", backend: "metal", blas: "openblas", goos: "darwin", goarch: "arm64"}},
		// The macOS wheel, installed on Linux for cross-builds: its backend
		// is the platform's default.
		{"linux", "amd64", []string{"-platform", "darwin/arm64", "-prefix", "/x/.deps/darwin-arm64"}, options{prefix: "/x/.deps/darwin-arm64", backend: "metal", blas: "openblas", goos: "darwin", goarch: "arm64"}},
	} {
		got, err := parseFlags(c.args, c.goos, c.goarch, io.Discard)
		if err != nil || got != c.want {
			t.Errorf("%s/%s %q: got %+v, %v; want %+v", c.goos, c.goarch, c.args, got, err, c.want)
		}
	}
}

// A bad command line is refused with an error that names the value.
func TestParseFlagsErrors(t *testing.T) {
	for _, c := range []struct {
		goos, goarch string
		args         []string
		want         string
	}{
		{"linux", "amd64", []string{"-backend", "metal"}, `-backend "metal": want cpu or cuda-13 on linux/amd64`},
		{"linux", "amd64", []string{"-platform", "darwin/arm64", "-backend", "cpu"}, `-backend "cpu": want metal on darwin/arm64`},
		{"darwin", "arm64", []string{"-platform", "linux/amd64"}, `-platform linux/amd64: from darwin/arm64, only the wheel of darwin/arm64 can be installed`},
		{"linux", "amd64", []string{"-platform", "darwin/amd64"}, "MLX publishes no wheel for darwin/amd64"},
		{"darwin", "arm64", []string{"-backend", "cpu"}, `-backend "cpu": want metal on darwin/arm64`},
		{"linux", "amd64", []string{"-blas", "mkl"}, `-blas "mkl": want openblas or reference`},
		{"darwin", "arm64", []string{"-blas", "openblas"}, `-blas "openblas" applies to the cpu backend only, not "metal"`},
		{"linux", "amd64", []string{"-prefix", "/a,b"}, `-prefix "/a,b": the path may not contain a comma`},
		{"linux", "amd64", []string{"-prefix", ""}, `-prefix is empty`},
		{"linux", "amd64", []string{"extra"}, `unexpected argument "extra"`},
		{"darwin", "amd64", nil, "MLX publishes no wheel for darwin/amd64"},
		{"windows", "amd64", nil, "MLX publishes no wheel for windows/amd64"},
	} {
		_, err := parseFlags(c.args, c.goos, c.goarch, io.Discard)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s/%s %q: error %v, want %q", c.goos, c.goarch, c.args, err, c.want)
		}
	}
	if _, err := parseFlags([]string{"-nope"}, "linux", "amd64", io.Discard); !errors.Is(err, errUsage) {
		t.Errorf("-nope: error %v, want errUsage", err)
	}
	if _, err := parseFlags([]string{"-h"}, "linux", "amd64", io.Discard); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("-h: error %v, want flag.ErrHelp", err)
	}
}

func TestDefaultPrefix(t *testing.T) {
	t.Setenv("HOME", "/home/u")
	t.Setenv("XDG_DATA_HOME", "")
	if got, want := defaultPrefix(), "/home/u/.local/share/posttrainllm/mlx"; got != want {
		t.Errorf("without XDG_DATA_HOME: %q, want %q", got, want)
	}
	t.Setenv("XDG_DATA_HOME", "relative") // the spec says to ignore it
	if got, want := defaultPrefix(), "/home/u/.local/share/posttrainllm/mlx"; got != want {
		t.Errorf("relative XDG_DATA_HOME: %q, want %q", got, want)
	}
	t.Setenv("XDG_DATA_HOME", "/xdg")
	if got, want := defaultPrefix(), "/xdg/posttrainllm/mlx"; got != want {
		t.Errorf("XDG_DATA_HOME=/xdg: %q, want %q", got, want)
	}
}

// The printed line, run by a shell, puts the folder first on
// PKG_CONFIG_PATH, whatever characters the folder has.
func TestExportLine(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	for _, dir := range []string{
		filepath.Join(home, ".local/share/posttrainllm/mlx/pkgconfig"),
		"/opt/mlx/pkgconfig",
		"/tmp/it's a $dir/pkgconfig",
	} {
		line := exportLine(dir)
		for _, before := range []string{"", "/usr/lib/pkgconfig"} {
			want := dir
			if before != "" {
				want += ":" + before
			}
			cmd := exec.Command("sh", "-c", line+`; printf %s "$PKG_CONFIG_PATH"`)
			cmd.Env = append(os.Environ(), "PKG_CONFIG_PATH="+before)
			out, err := cmd.Output()
			if err != nil || string(out) != want {
				t.Errorf("%s with PKG_CONFIG_PATH=%q: %q, %v; want %q", line, before, out, err, want)
			}
		}
	}
	if got, want := exportLine(filepath.Join(home, "p/pkgconfig")), `export PKG_CONFIG_PATH="$HOME/p/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"`; got != want {
		t.Errorf("under $HOME: %s, want %s", got, want)
	}
}

// fakeInstall lays out what a complete install of backend looks like to
// the installer, with empty files.
func fakeInstall(t *testing.T, o options) {
	mlx := o.mlxDir()
	for _, f := range []string{"mlx/include/mlx/mlx.h", "mlx/lib/libmlx.so", "mlx/lib/libmlx.dylib", "mlx_cpu.libs/libblas-0.so.3"} {
		p := filepath.Join(mlx, filepath.FromSlash(f))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(mlx, stampFile), []byte(o.want()+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}

// Over a complete install the installer fetches nothing (a -python that
// does not exist would fail) and writes the .pc file, which pkg-config reads
// with paths under the prefix.
func TestRunOverCompleteInstall(t *testing.T) {
	prefix := filepath.Join(t.TempDir(), "my prefix")
	o := options{prefix: prefix, backend: "cpu"}
	fakeInstall(t, o)
	t.Setenv("PKG_CONFIG_PATH", "")
	var stdout, stderr bytes.Buffer
	args := []string{"-prefix", prefix, "-blas", "reference", "-python", filepath.Join(prefix, "no-python")}
	if err := run(args, &stdout, &stderr); err != nil {
		t.Fatalf("%v\n%s%s", err, stdout.String(), stderr.String())
	}
	for _, want := range []string{"MLX: mlx-cpu==" + mlxVersion + " already installed", "export PKG_CONFIG_PATH="} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, stdout.String())
		}
	}
	pc := filepath.Join(prefix, "pkgconfig", pcName+".pc")
	info, err := os.Stat(pc)
	if err != nil {
		t.Fatal(err)
	}

	// Once PKG_CONFIG_PATH has the folder, no export line; the .pc file is
	// left as it is.
	t.Setenv("PKG_CONFIG_PATH", filepath.Dir(pc)+":/elsewhere")
	stdout.Reset()
	if err := run(args, &stdout, &stderr); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(stdout.String(), "export") {
		t.Errorf("export line printed with the folder on PKG_CONFIG_PATH:\n%s", stdout.String())
	}
	if again, err := os.Stat(pc); err != nil || !again.ModTime().Equal(info.ModTime()) {
		t.Errorf("the unchanged .pc file was rewritten")
	}

	if _, err := exec.LookPath("pkg-config"); err != nil {
		t.Skip("no pkg-config")
	}
	out, err := exec.Command("pkg-config", "--cflags", "--libs", pcName).Output()
	if err != nil {
		t.Fatal(err)
	}
	// pkg-config escapes the space and keeps the ".." of ${pcfiledir}/..
	base := strings.ReplaceAll(prefix, " ", `\ `) + "/pkgconfig/../mlx/mlx"
	want := "-I" + base + "/include -L" + base + "/lib -lmlx -Wl,-rpath," + base + "/lib"
	if got := strings.TrimSpace(string(out)); got != want {
		t.Errorf("pkg-config --cflags --libs:\n got %s\nwant %s", got, want)
	}
}

// A version installed before is replaced, which needs pip: with no Python
// the error says so.
func TestRunOtherVersionNeedsPip(t *testing.T) {
	prefix := t.TempDir()
	o := options{prefix: prefix, backend: "cpu"}
	fakeInstall(t, o)
	if err := os.WriteFile(filepath.Join(o.mlxDir(), stampFile), []byte("mlx-cpu==0.0.1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	err := run([]string{"-prefix", prefix, "-python", filepath.Join(prefix, "no-python")}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "no-python") || !strings.Contains(err.Error(), "mlx-cpu=="+mlxVersion) {
		t.Errorf("error %v, want one naming the missing -python and the wheel", err)
	}
}

// The installer builds where MLX does not exist yet: it imports only the
// standard library.
func TestImportsStandardLibraryOnly(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", ".").Output()
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(out)); got != "github.com/posttrainllm/posttrainllm/cmd/install-mlx" {
		t.Errorf("non-standard imports:\n%s", got)
	}
}

// Over a complete install of the macOS wheel, -platform darwin/arm64 from
// another machine fetches nothing and writes the .pc file, with no export
// line: cross-builds name the folder themselves.
func TestRunCrossOverCompleteInstall(t *testing.T) {
	if runtime.GOOS == "darwin" && runtime.GOARCH == "arm64" {
		t.Skip("darwin/arm64 is this machine's own platform")
	}
	prefix := t.TempDir()
	o := options{prefix: prefix, backend: "metal"}
	fakeInstall(t, o)
	t.Setenv("PKG_CONFIG_PATH", "")
	var stdout, stderr bytes.Buffer
	args := []string{"-prefix", prefix, "-platform", "darwin/arm64", "-python", filepath.Join(prefix, "no-python")}
	if err := run(args, &stdout, &stderr); err != nil {
		t.Fatalf("%v\n%s%s", err, stdout.String(), stderr.String())
	}
	for _, want := range []string{"MLX: mlx-metal==" + mlxVersion + " already installed", "for darwin/arm64 builds"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, stdout.String())
		}
	}
	if strings.Contains(stdout.String(), "export") {
		t.Errorf("a cross install printed an export line:\n%s", stdout.String())
	}
	if _, err := os.Stat(filepath.Join(prefix, "pkgconfig", pcName+".pc")); err != nil {
		t.Fatal(err)
	}
}
