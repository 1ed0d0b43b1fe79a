#!/usr/bin/env bash
# Cross-build check for macOS on Apple silicon (make cross-darwin, part of
# make test). On Linux it builds posttrainllm, the other commands and every
# package's test binary for darwin/arm64 with cgo, Zig as the C and C++
# compiler and linker, against the mlx-metal wheel's headers and
# libmlx.dylib, and checks what macOS would resolve at load time. It cannot
# run the result; it proves that the macOS build compiles and links.
#
# Everything it installs is pinned and project-local, under .deps:
#   .deps/zig            ziglang from PyPI (the zig binary and its macOS libc)
#   .deps/zig-cache      Zig's cache: its libc++ build, paid once per checkout
#   .deps/darwin-arm64   mlx-metal (cmd/install-mlx -platform darwin/arm64),
#                        its pkgconfig folder, the library stubs (sdk/) and
#                        the built binaries (out/)
#
# Written for bash 3.2 and BSD tools too (macOS's own), where it has nothing
# to do: a Mac builds and runs the suite natively.
set -eu
set -o pipefail

cd "$(dirname "$0")/.."
root=$(pwd -P)
GO=${GO:-go}

ZIG_VERSION=0.15.2
# The oldest macOS the mlx-metal wheel supports (its platform tag).
MACOS_MIN=14.0

if [ "$(uname -s)" = Darwin ]; then
	echo "cross-darwin: this is macOS; make test builds and runs the suite here natively"
	exit 0
fi

deps="$root/.deps"
zigdir="$deps/zig"
prefix="$deps/darwin-arm64"
out="$prefix/out"
case "$root" in
*" "* | *"'"*) echo "cross-darwin: the checkout's path may not contain spaces or quotes: $root" >&2; exit 1 ;;
esac

say() { printf 'cross-darwin: %s\n' "$*"; }
started=$(date +%s)
lap() { say "$1 ($(( $(date +%s) - started ))s)"; }

# 1. Zig, pinned, from PyPI into .deps/zig (a stamp names the version).
want="ziglang==$ZIG_VERSION"
if [ "$(cat "$zigdir/.installed" 2>/dev/null || true)" != "$want" ]; then
	say "installing $want into $zigdir"
	rm -rf "$zigdir" "$zigdir.tmp"
	PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore \
		python3 -m pip install --quiet --no-compile --only-binary=:all: --target "$zigdir.tmp" "$want"
	echo "$want" >"$zigdir.tmp/.installed"
	mv "$zigdir.tmp" "$zigdir"
fi
zig="$zigdir/ziglang/zig"
libsystem="$zigdir/ziglang/lib/libc/darwin/libSystem.tbd"
"$zig" version >/dev/null

# 2. The mlx-metal wheel, at the version the bridge is pinned to.
"$GO" run ./cmd/install-mlx -prefix "$prefix" -platform darwin/arm64

# 3. Stubs of the Apple libraries Go's standard library links besides
# libSystem (libresolv, CoreFoundation, Security): Zig carries none of
# them. internal/darwinlink says what they hold.
"$GO" run ./internal/darwinlink stubs "$prefix/sdk"
lap "toolchain ready: zig $("$zig" version), $(grep '^Description' "$prefix/pkgconfig/posttrainllm-mlx.pc" | sed 's/^Description: //')"

# The darwin/arm64 build environment. Go's darwin link runs strip and
# dsymutil unless -w drops the DWARF; neither reads Mach-O here.
export ZIG_GLOBAL_CACHE_DIR="$deps/zig-cache" ZIG_LOCAL_CACHE_DIR="$deps/zig-cache"
xenv() {
	env GOOS=darwin GOARCH=arm64 CGO_ENABLED=1 GOFLAGS= \
		CC="$zig cc -target aarch64-macos.$MACOS_MIN" \
		CXX="$zig c++ -target aarch64-macos.$MACOS_MIN" \
		CGO_LDFLAGS="-F$prefix/sdk/Frameworks -L$prefix/sdk/lib" \
		PKG_CONFIG_PATH="$prefix/pkgconfig" \
		"$@"
}

# 4. No Linux-only link or compile flag in any package's #cgo lines that
# apply to darwin.
flags=$(xenv "$GO" list -f '{{.ImportPath}}: {{join .CgoCPPFLAGS " "}} {{join .CgoCFLAGS " "}} {{join .CgoCXXFLAGS " "}} {{join .CgoLDFLAGS " "}}' ./...)
if bad=$(printf '%s\n' "$flags" | grep -E -e '-lstdc\+\+|-Wl,--|-Wl,-(soname|z),|\$ORIGIN|-l:|\.so( |$)|-lrt( |$)|-ldl( |$)'); then
	echo "cross-darwin: Linux-only cgo flags on the darwin build:" >&2
	echo "$bad" >&2
	exit 1
fi

# 5. vet type-checks every package and its tests for darwin, so a
# Linux-only Go API (syscall.Gettid, …) fails here.
xenv "$GO" vet ./...
xenv "$GO" vet -tags gpu ./mlx ./model ./step ./train ./finetune # make test runs these on a Mac
lap "go vet ./... for darwin/arm64"

# 6. Build and link: the commands, and one test binary per package. All of
# them through Zig (-linkmode=external), packages without cgo too, so each
# binary's symbol table binds every import to a library, which is what the
# check reads.
rm -rf "$out"
mkdir -p "$out/cmd" "$out/tests" "$out/example-tests"
xenv "$GO" build -ldflags="-w -linkmode=external" -o "$out/cmd/" ./...
lap "built $(ls "$out/cmd" | tr '\n' ' ')"
# go test -c names a binary by its package's last element, and an example
# shares it with the package it shows (examples/finetune, finetune): the
# examples' test binaries go to a folder of their own.
xenv "$GO" test -c -ldflags="-w -linkmode=external" -o "$out/tests/" $("$GO" list ./... | grep -v '/examples/')
xenv "$GO" test -c -ldflags="-w -linkmode=external" -o "$out/example-tests/" ./examples/...
lap "built $(ls "$out/tests" "$out/example-tests" | grep -c '\.test$') test binaries"

# 7. Every imported symbol is bound to a library that exports it.
check() {
	"$GO" run ./internal/darwinlink check \
		-tbd "$libsystem" \
		-tbd "$prefix/sdk/lib/libresolv.tbd" \
		-tbd "$prefix/sdk/Frameworks/CoreFoundation.framework/CoreFoundation.tbd" \
		-tbd "$prefix/sdk/Frameworks/Security.framework/Security.tbd" \
		-dylib "$prefix/mlx/mlx/lib/libmlx.dylib" \
		"$@"
}
check "$out"/cmd/* "$out"/tests/* "$out"/example-tests/*

# The check must fail on what it exists to catch: a Linux-only libc call
# (gettid) let through by -undefined dynamic_lookup.
canary="$prefix/canary"
rm -rf "$canary"
mkdir -p "$canary"
printf '%s\n' 'int gettid(void);' 'int main(void) { return gettid() > 0 ? 0 : 1; }' >"$canary/canary.c"
xenv sh -c '$CC -o "$1" "$2" -Wl,-undefined,dynamic_lookup' sh "$canary/canary" "$canary/canary.c"
if check "$canary/canary" >"$canary/check.log" 2>&1; then
	echo "cross-darwin: the import check passed a binary that imports gettid by dynamic lookup:" >&2
	cat "$canary/check.log" >&2
	exit 1
fi
grep -q '_gettid' "$canary/check.log"
lap "darwin/arm64 build compiles and links; the import check rejects a Linux-only import"
