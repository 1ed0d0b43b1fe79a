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

// shimRevision goes into blasStamp beside the OpenBLAS version: an install
// whose shim predates a change to shimC is rebuilt.
const shimRevision = "shim 2: sgemm of one row or column as sgemv"

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
	linked := want + "; " + shimRevision
	if b, err := os.ReadFile(stamp); err == nil && strings.TrimSpace(string(b)) == linked {
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
	if err := os.WriteFile(stamp, []byte(linked+"\n"), 0o644); err != nil {
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

// shimC is the shim's C half. It keeps OpenBLAS at one thread unless
// OPENBLAS_NUM_THREADS says otherwise: MLX runs its own CPU threads, and
// OpenBLAS workers spinning beside them made a tiny step 2.7x slower on two
// cores. And it answers cblas_sgemm itself: a product with one row (M = 1:
// a decode step of one sequence, x·Wᵀ) or one column (N = 1) goes to
// sgemv, which reads the matrix once, where OpenBLAS's sgemm first copies
// it into its packed layout and then reads the copy: for SmolLM2-135M's
// MLP and vocabulary projections sgemv took a third of sgemm's time
// (docs/performance/generation.md). Everything else, and column-major calls
// (MLX makes none), go to OpenBLAS's sgemm unchanged.
const shimC = `#include <stdlib.h>
#include <string.h>
enum { RowMajor = 101, NoTrans = 111, Trans = 112 };
void scipy_openblas_set_num_threads(int);
void scipy_cblas_sgemm(int, int, int, int, int, int, float, const float *, int,
                       const float *, int, float, float *, int);
void scipy_cblas_sgemv(int, int, int, int, float, const float *, int,
                       const float *, int, float, float *, int);
__attribute__((constructor)) static void ptlm_blas_threads(void) {
  if (getenv("OPENBLAS_NUM_THREADS") == NULL) scipy_openblas_set_num_threads(1);
}
void cblas_sgemm(int order, int ta, int tb, int M, int N, int K, float alpha,
                 const float *A, int lda, const float *B, int ldb, float beta,
                 float *C, int ldc) {
  if (order != RowMajor || K < 1 || M < 1 || N < 1 || (M != 1 && N != 1)) {
    scipy_cblas_sgemm(order, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    return;
  }
  if (M == 1) { /* C[0, :] = alpha * op(A)[0, :] · op(B) + beta * C */
    if (beta == 0) memset(C, 0, (size_t)N * sizeof(float));
    int incx = ta == NoTrans ? 1 : lda;
    if (tb == NoTrans) /* B is [K, N] */
      scipy_cblas_sgemv(RowMajor, Trans, K, N, alpha, B, ldb, A, incx, beta, C, 1);
    else /* B is [N, K] */
      scipy_cblas_sgemv(RowMajor, NoTrans, N, K, alpha, B, ldb, A, incx, beta, C, 1);
    return;
  }
  /* N == 1: C[:, 0] = alpha * op(A) · op(B)[:, 0] + beta * C */
  if (beta == 0)
    for (int m = 0; m < M; m++) C[(size_t)m * ldc] = 0;
  int incx = tb == NoTrans ? ldb : 1;
  if (ta == NoTrans) /* A is [M, K] */
    scipy_cblas_sgemv(RowMajor, NoTrans, M, K, alpha, A, lda, B, incx, beta, C, ldc);
  else /* A is [K, M] */
    scipy_cblas_sgemv(RowMajor, Trans, K, M, alpha, A, lda, B, incx, beta, C, ldc);
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
		if s == "cblas_sgemm" {
			continue // shimC's
		}
		fmt.Fprintf(&asm, "  .globl %s\n  .type %s, @function\n%s:\n  jmp scipy_%s@PLT\n", s, s, s, s)
	}
	asm.WriteString("  .section .note.GNU-stack,\"\",@progbits\n")
	if err := os.WriteFile(filepath.Join(work, "shim.S"), []byte(asm.String()), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(work, "shim.c"), []byte(shimC), 0o644); err != nil {
		return err
	}
	soname := filepath.Base(target)
	// Built beside target (a dot name the libblas-* glob skips), so the
	// rename below stays on one file system.
	out := filepath.Join(filepath.Dir(target), "."+soname+".new")
	defer os.Remove(out)
	cmd := exec.Command(cc, "-shared", "-fPIC", "-O2", "-o", out,
		filepath.Join(work, "shim.S"), filepath.Join(work, "shim.c"),
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
