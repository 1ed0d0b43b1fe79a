package mlx

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Version reports the libmlx the bridge runs against: the version
// pkg-config gives for the library it was built with.
func TestVersionIsTheLinkedLibrarys(t *testing.T) {
	got, err := Version()
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("pkg-config", "--modversion", "posttrainllm-mlx").Output()
	if err != nil {
		t.Fatalf("pkg-config --modversion posttrainllm-mlx: %v", err)
	}
	if want := strings.TrimSpace(string(out)); got != want {
		t.Fatalf("Version() = %q, pkg-config says %q", got, want)
	}
}

func TestKernelCacheFolder(t *testing.T) {
	got := KernelCacheFolder("/c", "0.32.4", "NVIDIA H200", "sm_90")
	if want := filepath.Join("/c", "mlx-0.32.4", "NVIDIA-H200-sm_90"); got != want {
		t.Fatalf("folder %q, want %q", got, want)
	}
	for _, other := range []string{
		KernelCacheFolder("/c", "0.32.4", "NVIDIA H200", "sm_100"),
		KernelCacheFolder("/c", "0.32.5", "NVIDIA H200", "sm_90"),
		KernelCacheFolder("/c", "0.32.4", "NVIDIA A100/80GB", "sm_80"),
	} {
		if other == got || filepath.Dir(filepath.Dir(other)) != "/c" {
			t.Errorf("folder %q: want another folder two levels under /c", other)
		}
	}
}

// UseKernelCache sets MLX's kernel folder under the given directory when
// the user has not, creates it, and leaves a user's setting alone.
func TestUseKernelCache(t *testing.T) {
	t.Setenv(KernelCacheEnv, "") // restored after the test
	os.Unsetenv(KernelCacheEnv)
	dir := t.TempDir()
	folder, set, err := UseKernelCache(dir)
	if err != nil {
		t.Fatal(err)
	}
	version, err := Version()
	if err != nil {
		t.Fatal(err)
	}
	dev := CPU
	if GPU.Available() {
		dev = GPU
	}
	name, arch, err := dev.Describe()
	if err != nil {
		t.Fatal(err)
	}
	if name == "" && arch == "" {
		name = dev.String()
	}
	if want := KernelCacheFolder(dir, version, name, arch); !set || folder != want {
		t.Fatalf("UseKernelCache = %q, set %v; want %q, set", folder, set, want)
	}
	if fi, err := os.Stat(folder); err != nil || !fi.IsDir() {
		t.Fatalf("the folder was not created: %v", err)
	}
	if v := os.Getenv(KernelCacheEnv); v != folder {
		t.Fatalf("%s = %q, want %q", KernelCacheEnv, v, folder)
	}

	// Now set, by the call above or by the user: it stands.
	mine := filepath.Join(t.TempDir(), "mine")
	t.Setenv(KernelCacheEnv, mine)
	other := t.TempDir()
	folder, set, err = UseKernelCache(other)
	if err != nil || set || folder != mine {
		t.Fatalf("with %s set: %q, set %v, %v; want the user's %q untouched", KernelCacheEnv, folder, set, err, mine)
	}
	if os.Getenv(KernelCacheEnv) != mine {
		t.Fatalf("%s changed to %q", KernelCacheEnv, os.Getenv(KernelCacheEnv))
	}
	if entries, _ := os.ReadDir(other); len(entries) != 0 {
		t.Fatalf("created %d entries in %s though the user's folder stands", len(entries), other)
	}

	// A directory that cannot be created is an error naming the variable.
	os.Unsetenv(KernelCacheEnv)
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := UseKernelCache(file); err == nil || !strings.Contains(err.Error(), KernelCacheEnv) {
		t.Fatalf("under a file: %v; want an error naming %s", err, KernelCacheEnv)
	}
}
