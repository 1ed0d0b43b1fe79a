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

// lastError reads the bridge's last error message for the calling thread.
// Only finish calls it, on the thread whose call failed.
func lastError() string { return C.GoString(C.ptlm_last_error()) }

// bridgeError is a failed bridge call's message, before it is given an op
// and operands.
type bridgeError string

func (e bridgeError) Error() string { return string(e) }

// opError builds an *Error for op from a failed bridge call's error and a
// description of the operands.
func opError(op string, err error, operands ...*Array) error {
	parts := make([]string, 0, len(operands))
	for _, a := range operands {
		parts = append(parts, a.describe())
	}
	return &Error{Op: op, Operands: strings.Join(parts, ", "), Msg: err.Error()}
}

// check names op in the error of a bridge call, or returns nil.
func check(op string, err error) error {
	if err == nil {
		return nil
	}
	return &Error{Op: op, Msg: err.Error()}
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
