package main

import (
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"testing"
)

// A stub in the layout of Zig's libSystem.tbd: an umbrella document that
// re-exports others, lists that span lines, entries for other targets.
const sampleTBD = `--- !tapi-tbd
tbd-version:     4
targets:         [ x86_64-macos, arm64-macos,
                   arm64e-macos ]
install-name:    '/usr/lib/libSystem.B.dylib'
reexported-libraries:
  - targets:         [ x86_64-macos, arm64-macos ]
    libraries:       [ '/usr/lib/system/libsystem_c.dylib' ]
exports:
  - targets:         [ x86_64-macos ]
    symbols:         [ '_only_on_intel' ]
  - targets:         [ x86_64-macos, arm64-macos ]
    symbols:         [ ___crashreporter_info__, _mach_init_routine ]
...
--- !tapi-tbd
tbd-version:     4
targets:         [ x86_64-macos, arm64-macos ]
install-name:    '/usr/lib/system/libsystem_c.dylib'
exports:
  - targets:         [ x86_64-macos, arm64-macos ]
    symbols:         [ _fopen, _malloc,
                       _pthread_threadid_np ]
    objc-classes:    [ NSThing ]
    weak-symbols:    [ _weakling ]
...
`

func TestParseTBD(t *testing.T) {
	libs, err := parseTBD([]byte(sampleTBD), "arm64-macos")
	if err != nil {
		t.Fatal(err)
	}
	if len(libs) != 2 || libs[0].installName != "/usr/lib/libSystem.B.dylib" || libs[1].installName != "/usr/lib/system/libsystem_c.dylib" {
		t.Fatalf("libraries %+v", libs)
	}
	if want := []string{"___crashreporter_info__", "_mach_init_routine"}; !slices.Equal(libs[0].symbols, want) {
		t.Errorf("libSystem exports %q, want %q (not the x86-64-only symbol)", libs[0].symbols, want)
	}
	want := []string{"_fopen", "_malloc", "_pthread_threadid_np", "_OBJC_CLASS_$_NSThing", "_OBJC_METACLASS_$_NSThing", "_weakling"}
	if !slices.Equal(libs[1].symbols, want) {
		t.Errorf("libsystem_c exports %q, want %q", libs[1].symbols, want)
	}
}

// The stubs hold what Go's standard library imports from each library,
// and read back through parseTBD.
func TestStubs(t *testing.T) {
	imports, err := goImports(filepath.Join(runtime.GOROOT(), "src"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := writeStubs(dir, imports); err != nil {
		t.Fatal(err)
	}
	for lib, sym := range map[string]string{
		"/usr/lib/libresolv.9.dylib": "_res_9_ninit",
		"/System/Library/Frameworks/CoreFoundation.framework/Versions/A/CoreFoundation": "_CFRelease",
		"/System/Library/Frameworks/Security.framework/Versions/A/Security":             "_SecTrustEvaluateWithError",
	} {
		path, ok := stubPath(dir, lib)
		if !ok {
			t.Fatalf("no stub path for %s", lib)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		libs, err := parseTBD(b, "arm64-macos")
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if len(libs) != 1 || libs[0].installName != lib || !slices.Contains(libs[0].symbols, sym) {
			t.Errorf("%s: %+v, want %s exporting %s", path, libs, lib, sym)
		}
	}
	if p, _ := stubPath(dir, "/System/Library/Frameworks/CoreFoundation.framework/Versions/A/CoreFoundation"); p != filepath.Join(dir, "Frameworks", "CoreFoundation.framework", "CoreFoundation.tbd") {
		t.Errorf("CoreFoundation's stub at %s, not where -F finds it", p)
	}
	if p, _ := stubPath(dir, "/usr/lib/libresolv.9.dylib"); p != filepath.Join(dir, "lib", "libresolv.tbd") {
		t.Errorf("libresolv's stub at %s, not where -L finds it for -lresolv", p)
	}
}
