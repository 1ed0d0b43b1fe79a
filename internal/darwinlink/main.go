// Command darwinlink supports the macOS cross-build check (make
// cross-darwin, scripts/cross-darwin.sh), which builds posttrainllm and its
// test binaries for darwin/arm64 on Linux with Zig as the C and C++
// compiler and linker, against the mlx-metal wheel's headers and
// libmlx.dylib. It cannot run what it builds; it proves that the macOS
// build compiles and that every symbol it imports exists where macOS will
// look for it.
//
//	darwinlink stubs DIR
//
// writes the text stubs (.tbd) of the Apple libraries besides libSystem
// that Go's standard library links on darwin: libresolv (package net),
// and the CoreFoundation and Security frameworks (crypto/x509). Zig ships
// libSystem's stub, not these; a .tbd names a library's install path and
// the symbols it exports, which is all a linker reads from it. Each stub
// exports exactly what the standard library of the Go toolchain that runs
// darwinlink imports from that library (its //go:cgo_import_dynamic lines),
// so the link needs no -undefined dynamic_lookup and a symbol of the
// project's own code that these libraries do not export fails to link.
//
//	darwinlink check -tbd FILE... -dylib FILE... BINARY...
//
// reads each Mach-O BINARY's imported symbols and the library each is
// bound to (two-level namespace), and fails unless the binary is arm64,
// loads only the expected libraries, imports nothing by flat (dynamic)
// lookup, and each library named by -tbd (a text stub, such as Zig's
// libSystem.tbd) or -dylib (libmlx.dylib) exports every symbol bound to it.
package main

import (
	"bufio"
	"bytes"
	"debug/macho"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "darwinlink:", err)
		os.Exit(1)
	}
}

func run(args []string, stdout io.Writer) error {
	if len(args) == 0 {
		return errors.New("usage: darwinlink stubs DIR | darwinlink check -tbd FILE -dylib FILE BINARY...")
	}
	switch args[0] {
	case "stubs":
		if len(args) != 2 {
			return errors.New("usage: darwinlink stubs DIR")
		}
		imports, err := goImports(filepath.Join(runtime.GOROOT(), "src"))
		if err != nil {
			return err
		}
		return writeStubs(args[1], imports)
	case "check":
		return check(args[1:], stdout)
	}
	return fmt.Errorf("unknown command %q: want stubs or check", args[0])
}

// The libraries a darwin build of posttrainllm may load, by install name.
// libmlx is found through the rpath that the pkg-config file sets;
// libc++ is the system's on a Mac (Zig links its own statically instead).
var allowedLibs = []string{
	"@rpath/libmlx.dylib",
	"/usr/lib/libSystem.B.dylib",
	"/usr/lib/libc++.1.dylib",
	"/usr/lib/libresolv.9.dylib",
	"/System/Library/Frameworks/CoreFoundation.framework/Versions/A/CoreFoundation",
	"/System/Library/Frameworks/Security.framework/Versions/A/Security",
}

// stubbedLibs are the libraries whose stubs darwinlink writes: those
// Go's standard library links on darwin, besides libSystem.
var stubbedLibs = []string{
	"/usr/lib/libresolv.9.dylib",
	"/System/Library/Frameworks/CoreFoundation.framework/Versions/A/CoreFoundation",
	"/System/Library/Frameworks/Security.framework/Versions/A/Security",
}

// stubPath is where a stub for install name lib goes under the stubs
// folder: frameworks under Frameworks/ (for -F), libraries under lib/ (for
// -L), as a linker looks them up for -framework NAME and -lNAME.
func stubPath(dir, lib string) (string, bool) {
	if name, ok := strings.CutPrefix(lib, "/System/Library/Frameworks/"); ok {
		fw, _, _ := strings.Cut(name, ".framework/")
		return filepath.Join(dir, "Frameworks", fw+".framework", fw+".tbd"), true
	}
	if name, ok := strings.CutPrefix(lib, "/usr/lib/"); ok && name != "libSystem.B.dylib" {
		base, _, _ := strings.Cut(name, ".") // libresolv.9.dylib -> libresolv
		return filepath.Join(dir, "lib", base+".tbd"), true
	}
	return "", false
}

var importLine = regexp.MustCompile(`^//go:cgo_import_dynamic \S+ (\S+) "([^"]+)"`)

// goImports reads the symbols that the Go standard library under src
// imports from each Apple library on darwin, by install name.
func goImports(src string) (map[string][]string, error) {
	out := map[string][]string{}
	err := filepath.WalkDir(src, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if d.Name() == "testdata" || d.Name() == "cmd" && filepath.Dir(path) == src {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if !bytes.Contains(b, []byte("cgo_import_dynamic")) {
			return nil
		}
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			m := importLine.FindStringSubmatch(sc.Text())
			if m == nil {
				continue
			}
			if slices.Contains(stubbedLibs, m[2]) {
				out[m[2]] = append(out[m[2]], "_"+m[1])
			}
		}
		return sc.Err()
	})
	for lib, syms := range out {
		slices.Sort(syms)
		out[lib] = slices.Compact(syms)
	}
	return out, err
}

// stubText is a text-based stub (TAPI .tbd, version 4) of one library.
func stubText(lib string, syms []string) string {
	quoted := make([]string, len(syms))
	for i, s := range syms {
		quoted[i] = "'" + s + "'"
	}
	return fmt.Sprintf(`--- !tapi-tbd
# Written by posttrainllm's internal/darwinlink for the macOS cross-build
# check: the symbols Go's standard library imports from this library.
tbd-version:     4
targets:         [ arm64-macos ]
install-name:    '%s'
exports:
  - targets:         [ arm64-macos ]
    symbols:         [ %s ]
...
`, lib, strings.Join(quoted, ", "))
}

func writeStubs(dir string, imports map[string][]string) error {
	for _, lib := range stubbedLibs {
		path, _ := stubPath(dir, lib)
		if len(imports[lib]) == 0 {
			return fmt.Errorf("Go's standard library imports nothing from %s: has the toolchain changed how it links darwin?", lib)
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(path, []byte(stubText(lib, imports[lib])), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// listFlag collects a repeated flag.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

func check(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("check", flag.ContinueOnError)
	var tbds, dylibs listFlag
	fs.Var(&tbds, "tbd", "a text stub (.tbd) of a library the binaries may import from (repeatable)")
	fs.Var(&dylibs, "dylib", "a Mach-O library the binaries may import from (repeatable)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return errors.New("check: no binaries")
	}
	exports := map[string]map[string]bool{} // install name -> symbols
	for _, f := range tbds {
		b, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		libs, err := parseTBD(b, "arm64-macos")
		if err != nil {
			return fmt.Errorf("%s: %v", f, err)
		}
		// An umbrella library (libSystem) exports what the libraries it
		// re-exports do: a stub file carries them all.
		umbrella := ""
		for _, l := range libs {
			if umbrella == "" {
				umbrella = l.installName
			}
			for _, name := range []string{l.installName, umbrella} {
				if exports[name] == nil {
					exports[name] = map[string]bool{}
				}
				for _, s := range l.symbols {
					exports[name][s] = true
				}
			}
		}
	}
	for _, f := range dylibs {
		name, syms, err := dylibExports(f)
		if err != nil {
			return err
		}
		exports[name] = syms
	}
	var failed []string
	for _, bin := range fs.Args() {
		n, problems, err := checkBinary(bin, exports)
		if err != nil {
			return err
		}
		if len(problems) > 0 {
			failed = append(failed, fmt.Sprintf("%s:\n  %s", bin, strings.Join(problems, "\n  ")))
			continue
		}
		fmt.Fprintf(stdout, "ok   %s: %d imported symbols, each exported by the library it is bound to\n", bin, n)
	}
	if len(failed) > 0 {
		return fmt.Errorf("imports macOS would not resolve:\n%s", strings.Join(failed, "\n"))
	}
	return nil
}

// Load commands that add a library, whose order numbers the libraries
// that symbols are bound to (ordinal 1 is the first).
var dylibLoads = map[macho.LoadCmd]bool{
	macho.LoadCmdDylib: true, // LC_LOAD_DYLIB
	0x80000018:         true, // LC_LOAD_WEAK_DYLIB
	0x8000001f:         true, // LC_REEXPORT_DYLIB
	0x20:               true, // LC_LAZY_LOAD_DYLIB
	0x80000023:         true, // LC_LOAD_UPWARD_DYLIB
}

// Special library ordinals of an undefined symbol.
const (
	selfOrdinal          = 0x00
	dynamicLookupOrdinal = 0xfe
	executableOrdinal    = 0xff
	flagTwoLevel         = 0x80 // MH_TWOLEVEL
)

// loadedLibs lists the install names of the libraries f loads, in
// ordinal order.
func loadedLibs(f *macho.File) []string {
	var libs []string
	for _, l := range f.Loads {
		raw := l.Raw()
		if len(raw) < 12 {
			continue
		}
		cmd := macho.LoadCmd(f.ByteOrder.Uint32(raw))
		if !dylibLoads[cmd] {
			continue
		}
		off := f.ByteOrder.Uint32(raw[8:])
		name := ""
		if int(off) < len(raw) {
			name = string(raw[off:])
			if i := strings.IndexByte(name, 0); i >= 0 {
				name = name[:i]
			}
		}
		libs = append(libs, name)
	}
	return libs
}

// checkBinary returns the number of imported symbols of the Mach-O file at
// path and what is wrong with them.
func checkBinary(path string, exports map[string]map[string]bool) (int, []string, error) {
	f, err := macho.Open(path)
	if err != nil {
		return 0, nil, fmt.Errorf("%s: %v", path, err)
	}
	defer f.Close()
	var problems []string
	if f.Cpu != macho.CpuArm64 {
		problems = append(problems, fmt.Sprintf("built for %v, want arm64", f.Cpu))
	}
	if f.Flags&flagTwoLevel == 0 {
		problems = append(problems, "linked with a flat namespace: imports are not bound to libraries")
	}
	libs := loadedLibs(f)
	for _, l := range libs {
		if !slices.Contains(allowedLibs, l) {
			problems = append(problems, fmt.Sprintf("loads %s, which a macOS build of posttrainllm has no reason to (allowed: %s)", l, strings.Join(allowedLibs, ", ")))
		}
	}
	if f.Symtab == nil {
		return 0, append(problems, "no symbol table"), nil
	}
	n := 0
	for _, s := range f.Symtab.Syms {
		const nExt, nType, nUndf = 0x01, 0x0e, 0x00
		if s.Type&nExt == 0 || s.Type&nType != nUndf || s.Value != 0 {
			continue // not an import (a common symbol has a size in Value)
		}
		n++
		ord := int(s.Desc >> 8)
		switch {
		case ord == dynamicLookupOrdinal || ord == selfOrdinal || ord == executableOrdinal:
			// What -undefined dynamic_lookup lets through: no library at
			// link time exported it, and dyld looks for it in every
			// library loaded at run time.
			problems = append(problems, fmt.Sprintf("%s: bound to no library (left to lookup at run time, as -undefined dynamic_lookup does): nothing it links exports it", s.Name))
		case ord > len(libs):
			problems = append(problems, fmt.Sprintf("%s: bound to library #%d of %d", s.Name, ord, len(libs)))
		default:
			lib := libs[ord-1]
			syms, known := exports[lib]
			if !known {
				problems = append(problems, fmt.Sprintf("%s: bound to %s, whose exports were not given to check (-tbd or -dylib)", s.Name, lib))
			} else if !syms[s.Name] {
				problems = append(problems, fmt.Sprintf("%s: bound to %s, which does not export it", s.Name, lib))
			}
		}
	}
	return n, problems, nil
}

// dylibExports returns a Mach-O library's install name and the external
// symbols it defines.
func dylibExports(path string) (string, map[string]bool, error) {
	f, err := macho.Open(path)
	if err != nil {
		return "", nil, fmt.Errorf("%s: %v", path, err)
	}
	defer f.Close()
	name := ""
	for _, l := range f.Loads {
		raw := l.Raw()
		const lcIDDylib = 0xd
		if len(raw) >= 12 && f.ByteOrder.Uint32(raw) == lcIDDylib {
			off := f.ByteOrder.Uint32(raw[8:])
			if int(off) < len(raw) {
				name, _, _ = strings.Cut(string(raw[off:]), "\x00")
			}
		}
	}
	if name == "" {
		return "", nil, fmt.Errorf("%s: not a library (no LC_ID_DYLIB)", path)
	}
	if f.Symtab == nil {
		return "", nil, fmt.Errorf("%s: no symbol table", path)
	}
	syms := map[string]bool{}
	for _, s := range f.Symtab.Syms {
		const nExt, nType, nSect, nIndr = 0x01, 0x0e, 0x0e, 0x0a
		if s.Type&nExt != 0 && (s.Type&nType == nSect || s.Type&nType == nIndr) {
			syms[s.Name] = true
		}
	}
	return name, syms, nil
}

// tbdLib is one document of a text stub: a library and the symbols it
// exports for the target.
type tbdLib struct {
	installName string
	symbols     []string
}

// tbdList matches a key and its bracketed list, which may span lines.
var tbdList = regexp.MustCompile(`(?s)([a-z-]+):\s*\[([^\]]*)\]`)

// parseTBD reads the exports of a TAPI text stub, version 4 (what Zig
// ships and stubText writes), for target. It reads the keys a stub uses
// for exports: the exports and reexports sections, each a list of
// (targets, symbols / weak-symbols / thread-local-symbols / objc-classes
// / objc-eh-types / objc-ivars) entries.
func parseTBD(b []byte, target string) ([]tbdLib, error) {
	var libs []tbdLib
	for _, doc := range strings.Split(string(b), "--- !tapi-tbd") {
		if strings.TrimSpace(doc) == "" {
			continue
		}
		var lib tbdLib
		section := ""
		var entryTargets []string
		// Walk the document's top-level keys and, inside the export
		// sections, its entries' bracketed lists in order.
		lines := strings.Split(doc, "\n")
		var body strings.Builder
		flush := func() error {
			text := body.String()
			body.Reset()
			if section != "exports" && section != "reexports" {
				return nil
			}
			for _, m := range tbdList.FindAllStringSubmatch(text, -1) {
				items := splitList(m[2])
				switch m[1] {
				case "targets":
					entryTargets = items
				case "symbols", "weak-symbols", "thread-local-symbols":
					if slices.Contains(entryTargets, target) {
						lib.symbols = append(lib.symbols, items...)
					}
				case "objc-classes":
					if slices.Contains(entryTargets, target) {
						for _, c := range items {
							lib.symbols = append(lib.symbols, "_OBJC_CLASS_$_"+c, "_OBJC_METACLASS_$_"+c)
						}
					}
				case "objc-eh-types":
					if slices.Contains(entryTargets, target) {
						for _, c := range items {
							lib.symbols = append(lib.symbols, "_OBJC_EHTYPE_$_"+c)
						}
					}
				case "objc-ivars":
					if slices.Contains(entryTargets, target) {
						for _, c := range items {
							lib.symbols = append(lib.symbols, "_OBJC_IVAR_$_"+c)
						}
					}
				}
			}
			return nil
		}
		for _, line := range lines {
			if line != "" && line[0] != ' ' && line[0] != '#' {
				if err := flush(); err != nil {
					return nil, err
				}
				key, val, _ := strings.Cut(line, ":")
				section = strings.TrimSpace(key)
				if section == "install-name" {
					lib.installName = strings.Trim(strings.TrimSpace(val), `'"`)
				}
				continue
			}
			body.WriteString(line)
			body.WriteByte('\n')
		}
		if err := flush(); err != nil {
			return nil, err
		}
		if lib.installName == "" {
			return nil, errors.New("a stub document without install-name")
		}
		libs = append(libs, lib)
	}
	if len(libs) == 0 {
		return nil, errors.New("no stub documents")
	}
	return libs, nil
}

// splitList splits a stub's bracketed list into its unquoted items.
func splitList(s string) []string {
	var out []string
	for _, item := range strings.Split(s, ",") {
		item = strings.Trim(strings.TrimSpace(item), `'"`)
		if item != "" {
			out = append(out, item)
		}
	}
	return out
}
