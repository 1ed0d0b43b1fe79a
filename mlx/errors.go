package mlx

/*
#include "bridge.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"strings"
)

// Error is an MLX failure: the operation, its operands, and MLX's message.
type Error struct {
	Op       string // the posttrainllm name of the operation, e.g. "matmul"
	Operands string // operand dtypes and shapes, e.g. "float32[2,3], float32[4,5]"
	Msg      string // MLX's own message
}

// Error formats the failure as "mlx: op(operands): message".
func (e *Error) Error() string {
	if e.Operands == "" {
		return fmt.Sprintf("mlx: %s: %s", e.Op, e.Msg)
	}
	return fmt.Sprintf("mlx: %s(%s): %s", e.Op, e.Operands, e.Msg)
}

// lastError reads the bridge's thread-local error message.
func lastError() string { return C.GoString(C.ptlm_last_error()) }

// opError builds an *Error for op with the bridge's last message and a
// description of the operands.
func opError(op string, operands ...*Array) error {
	parts := make([]string, 0, len(operands))
	for _, a := range operands {
		parts = append(parts, a.describe())
	}
	return &Error{Op: op, Operands: strings.Join(parts, ", "), Msg: lastError()}
}

// check turns a bridge status into an error for op.
func check(rc C.int, op string) error {
	if rc == 0 {
		return nil
	}
	return &Error{Op: op, Msg: lastError()}
}

// errFreed is carried by arrays used after Free.
var errFreed = errors.New("mlx: use of a freed array")

// firstErr returns the first error carried by any of the arrays, or an error
// for a nil or freed array.
func firstErr(arrs ...*Array) error {
	for _, a := range arrs {
		if a == nil {
			return errors.New("mlx: nil array")
		}
		if a.err != nil {
			return a.err
		}
		if a.h == nil {
			return errFreed
		}
	}
	return nil
}
