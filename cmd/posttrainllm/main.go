// Command posttrainllm trains, evaluates, benchmarks and samples small GPT
// models on MLX from Go.
//
//	posttrainllm train --preset tiny --steps 200 --corpus input.txt --out runs/tiny
//	posttrainllm train --resume runs/tiny --steps 400
//	posttrainllm sample --from runs/tiny --prompt "ROMEO:"
//	posttrainllm eval --from runs/tiny
//	posttrainllm bench --preset tiny --compare
//	posttrainllm presets
//	posttrainllm version
//
// Every preset field can be overridden by a flag; see posttrainllm help train.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/posttrainllm/posttrainllm/internal/hostheap"
)

func main() {
	hostheap.KeepFreedMemory() // MLX's CPU buffers reused, not mapped anew (package hostheap)
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// exitError carries a process exit status with its error.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit status %d", e.code)
	}
	return e.err.Error()
}
func (e *exitError) Unwrap() error { return e.err }

// Exit statuses beyond 0 and 1: a run stopped by a signal exits with 128 +
// the signal's number.
const (
	exitUsage   = 2   // bad command line
	exitSIGINT  = 130 // 128 + SIGINT
	exitSIGTERM = 143 // 128 + SIGTERM
)

// run executes the command line args and returns the exit status.
func run(args []string, stdout, stderr io.Writer) int {
	root := newRootCmd(stdout, stderr)
	root.SetArgs(args)
	err := root.Execute()
	if err == nil {
		return 0
	}
	code := 1
	var ee *exitError
	if errors.As(err, &ee) {
		code = ee.code
	}
	if ee == nil || ee.err != nil {
		fmt.Fprintf(stderr, "posttrainllm: %v\n", err)
	}
	return code
}
