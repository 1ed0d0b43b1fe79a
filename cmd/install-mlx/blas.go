package main

// The mlx-cpu wheel bundles the reference (netlib) BLAS, whose sgemm runs at
// a few GFLOP/s: on a 2-core machine it took 73% of a tiny training step
// (perf, docs/performance/cpu.md). PyPI's scipy-openblas32 wheel carries a
// current OpenBLAS, but with every symbol prefixed "scipy_". routeBLAS
// installs that wheel under the prefix (blas/) and replaces the MLX wheel's
// libblas with a shim of the same soname whose every exported function is a
// one-instruction jump to the scipy_-prefixed OpenBLAS function, so libmlx's
// cblas_sgemm and the bundled LAPACK's Fortran BLAS calls run in OpenBLAS.
// The wheel's own library is kept beside it as *.reference; -blas reference
// puts it back.

import (
	"debug/elf"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
)

// blasStamp, in the MLX folder, names the OpenBLAS the shim calls; it goes
// with the MLX folder when a new wheel replaces it.
const blasStamp = ".blas"

func routeBLAS(o options, stdout, stderr io.Writer) error {
	if runtime.GOOS != "linux" {
		return nil
	}
	warn := func(format string, args ...any) {
		fmt.Fprintf(stderr, "install-mlx: "+format+"\n", args...)
	}
	libs := filepath.Join(o.mlxDir(), "mlx_cpu.libs")
	stamp := filepath.Join(o.mlxDir(), blasStamp)
	want := "scipy-openblas32==" + openblasVersion

	found, _ := filepath.Glob(filepath.Join(libs, "libblas-*.so*"))
	found = slices.DeleteFunc(found, func(f string) bool { return strings.HasSuffix(f, ".reference") })
	if len(found) != 1 {
		warn("expected one libblas-*.so in %s, found %d; keeping MLX's BLAS", libs, len(found))
		return nil
	}
	target := found[0]
	orig := target + ".reference"

	if o.blas == "reference" {
		if exists(orig) {
			if err := os.Rename(orig, target); err != nil {
				return err
			}
		}
		if err := os.Remove(stamp); err != nil && !os.IsNotExist(err) {
			return err
		}
		fmt.Fprintln(stdout, "BLAS: using the reference BLAS bundled with mlx-cpu")
		return nil
	}
	if b, err := os.ReadFile(stamp); err == nil && strings.TrimSpace(string(b)) == want {
		fmt.Fprintf(stdout, "BLAS: %s already linked into %s\n", want, libs)
		return nil
	}
	// The shim is x86-64 assembly; elsewhere the wheel keeps its BLAS.
	if runtime.GOARCH != "amd64" {
		warn("routing BLAS calls to OpenBLAS is written for x86-64 only; keeping the reference BLAS (slow matmuls on CPU)")
		return nil
	}
	cc, err := exec.LookPath("cc")
	if err != nil {
		warn("'cc' not found; keeping the reference BLAS (slow matmuls on CPU)")
		return nil
	}

	if readStamp(o.blasDir()) != want {
		fmt.Fprintf(stdout, "BLAS: installing %s into %s\n", want, o.blasDir())
		tmp, err := pipInstall(o, want, o.blasDir(), false)
		if err != nil {
			return err
		}
		defer os.RemoveAll(tmp)
		if err := replaceDir(tmp, o.blasDir(), want); err != nil {
			return err
		}
	}
	openblasDir := filepath.Join(o.blasDir(), "scipy_openblas32", "lib")
	openblas := filepath.Join(openblasDir, "libscipy_openblas.so")
	if !exists(openblas) {
		warn("%s carries no %s; keeping the reference BLAS", want, openblas)
		return nil
	}

	// Keep the wheel's library: its exported symbols define the shim.
	if !exists(orig) {
		b, err := os.ReadFile(target)
		if err != nil {
			return err
		}
		if err := writeFileAtomic(orig, b, 0o755); err != nil {
			return err
		}
	}
	syms, err := shimSymbols(orig, target, libs, filepath.Join(o.mlxDir(), "mlx", "lib", "libmlx.so"))
	if err != nil {
		return err
	}
	have, _, err := dynSymbols(openblas)
	if err != nil {
		return err
	}
	var missing []string
	for _, s := range syms {
		if !slices.Contains(have, "scipy_"+s) {
			missing = append(missing, s)
		}
	}
	if len(missing) > 0 {
		warn("OpenBLAS lacks %s; keeping the reference BLAS", strings.Join(missing, " "))
		return nil
	}
	if err := buildShim(cc, syms, target, openblasDir); err != nil {
		return err
	}
	if err := os.WriteFile(stamp, []byte(want+"\n"), 0o644); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "BLAS: %d BLAS functions of %s now run in OpenBLAS (%s)\n", len(syms), filepath.Base(target), want)
	return nil
}

// shimSymbols lists, sorted, the functions the wheel's BLAS (orig) exports
// that libmlx or the wheel's other libraries (LAPACK) import: netlib's
// internal CBLAS helpers (sdotsub_, …) are imported by nobody.
func shimSymbols(orig, target, libs, libmlx string) ([]string, error) {
	exported, _, err := dynSymbols(orig)
	if err != nil {
		return nil, err
	}
	users, _ := filepath.Glob(filepath.Join(libs, "*.so*"))
	users = slices.DeleteFunc(users, func(f string) bool { return f == target || f == orig })
	imported := map[string]bool{}
	for _, lib := range append([]string{libmlx}, users...) {
		_, undef, err := dynSymbols(lib)
		if err != nil {
			return nil, err
		}
		for _, s := range undef {
			imported[s] = true
		}
	}
	var syms []string
	for _, s := range exported {
		if imported[s] {
			syms = append(syms, s)
		}
	}
	slices.Sort(syms)
	return slices.Compact(syms), nil
}

// dynSymbols reads an ELF library's dynamic symbol table: the functions it
// exports (global symbols in code, nm's "T") and the names it imports.
func dynSymbols(path string) (defined, undefined []string, err error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	syms, err := f.DynamicSymbols()
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %v", path, err)
	}
	for _, s := range syms {
		switch {
		case s.Name == "":
		case s.Section == elf.SHN_UNDEF:
			undefined = append(undefined, s.Name)
		case elf.ST_BIND(s.Info) == elf.STB_GLOBAL && elf.ST_TYPE(s.Info) != elf.STT_GNU_IFUNC &&
			int(s.Section) < len(f.Sections) && f.Sections[s.Section].Flags&elf.SHF_EXECINSTR != 0:
			defined = append(defined, s.Name)
		}
	}
	return defined, undefined, nil
}

// threadsC keeps OpenBLAS at one thread unless OPENBLAS_NUM_THREADS says
// otherwise: MLX runs its own CPU threads, and OpenBLAS workers spinning
// beside them made a tiny step 2.7x slower on two cores.
const threadsC = `#include <stdlib.h>
void scipy_openblas_set_num_threads(int);
__attribute__((constructor)) static void ptlm_blas_threads(void) {
  if (getenv("OPENBLAS_NUM_THREADS") == NULL) scipy_openblas_set_num_threads(1);
}
`

// buildShim compiles the shim and moves it over target. Its rpath is
// relative ($ORIGIN is mlx/mlx_cpu.libs under the prefix), so the prefix
// can move.
func buildShim(cc string, syms []string, target, openblasDir string) error {
	work, err := os.MkdirTemp("", "install-mlx-shim-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	var asm strings.Builder
	asm.WriteString("  .text\n")
	for _, s := range syms {
		fmt.Fprintf(&asm, "  .globl %s\n  .type %s, @function\n%s:\n  jmp scipy_%s@PLT\n", s, s, s, s)
	}
	asm.WriteString("  .section .note.GNU-stack,\"\",@progbits\n")
	if err := os.WriteFile(filepath.Join(work, "shim.S"), []byte(asm.String()), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(work, "threads.c"), []byte(threadsC), 0o644); err != nil {
		return err
	}
	soname := filepath.Base(target)
	// Built beside target (a dot name the libblas-* glob skips), so the
	// rename below stays on one file system.
	out := filepath.Join(filepath.Dir(target), "."+soname+".new")
	defer os.Remove(out)
	cmd := exec.Command(cc, "-shared", "-fPIC", "-O2", "-o", out,
		filepath.Join(work, "shim.S"), filepath.Join(work, "threads.c"),
		"-Wl,-soname,"+soname, "-L"+openblasDir, "-l:libscipy_openblas.so",
		"-Wl,-rpath,$ORIGIN/../../blas/scipy_openblas32/lib")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("building the BLAS shim: %v\n%s", err, b)
	}
	return os.Rename(out, target)
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
