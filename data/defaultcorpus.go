package data

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
)

// DefaultCorpusMaxBytes caps the default corpus at 8 MiB of Go source, so
// that tokenizing it takes seconds and the token cache stays small.
const DefaultCorpusMaxBytes = 8 << 20

// DefaultCorpusOptions are the options LoadDefaultCorpus applies to the
// directory DefaultCorpus returns: hand-written, non-test .go files outside
// testdata directories, the first DefaultCorpusMaxBytes of them in path
// order.
func DefaultCorpusOptions() CorpusOptions {
	return CorpusOptions{
		Extensions:       []string{".go"},
		ExcludeTests:     true,
		ExcludeGenerated: true,
		MaxBytes:         DefaultCorpusMaxBytes,
	}
}

// DefaultCorpus returns the directory of the default corpus: the Go
// standard library sources, GOROOT/src. Every machine that builds this
// program has them, so training works with no data download.
//
// GOROOT is taken from the GOROOT environment variable, else from
// `go env GOROOT`, else from the GOROOT this binary was built with; the
// first whose src directory exists wins.
func DefaultCorpus() (path string, err error) {
	return findGoSources(os.Getenv("GOROOT"), goEnvGOROOT, runtime.GOROOT())
}

// LoadDefaultCorpus loads DefaultCorpus with DefaultCorpusOptions.
func LoadDefaultCorpus() (*Corpus, error) {
	dir, err := DefaultCorpus()
	if err != nil {
		return nil, err
	}
	return LoadCorpusWith(dir, DefaultCorpusOptions())
}

// goEnvGOROOT asks the go command for GOROOT.
func goEnvGOROOT() (string, error) {
	out, err := exec.Command("go", "env", "GOROOT").Output()
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(out)), nil
}

// findGoSources returns GOROOT/src for the first of the candidate GOROOTs
// (the environment's, the go command's, the built-in one) that has it.
func findGoSources(envRoot string, goEnv func() (string, error), builtinRoot string) (string, error) {
	var tried []string
	check := func(source, root string) (string, bool) {
		if root == "" {
			tried = append(tried, source+" is empty")
			return "", false
		}
		src := filepath.Join(root, "src")
		info, err := os.Stat(src)
		if err != nil || !info.IsDir() {
			tried = append(tried, fmt.Sprintf("%s = %q has no src directory", source, root))
			return "", false
		}
		return src, true
	}
	if src, ok := check("$GOROOT", envRoot); ok {
		return src, nil
	}
	if root, err := goEnv(); err != nil {
		tried = append(tried, fmt.Sprintf("`go env GOROOT` failed: %v", err))
	} else if src, ok := check("`go env GOROOT`", root); ok {
		return src, nil
	}
	if src, ok := check("runtime.GOROOT()", builtinRoot); ok {
		return src, nil
	}
	return "", errors.New("default corpus: cannot find the Go standard library sources (GOROOT/src): " +
		strings.Join(tried, "; ") + "; set GOROOT or pass a corpus path")
}
