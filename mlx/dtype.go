package mlx

/*
#include "bridge.h"
*/
import "C"

import "fmt"

// Dtype is an MLX element type.
type Dtype int

// The element types posttrainllm uses; values match MLX's Dtype::Val.
const (
	Bool     Dtype = C.PTLM_BOOL
	Uint8    Dtype = C.PTLM_UINT8
	Uint16   Dtype = C.PTLM_UINT16
	Uint32   Dtype = C.PTLM_UINT32
	Uint64   Dtype = C.PTLM_UINT64
	Int8     Dtype = C.PTLM_INT8
	Int16    Dtype = C.PTLM_INT16
	Int32    Dtype = C.PTLM_INT32
	Int64    Dtype = C.PTLM_INT64
	Float16  Dtype = C.PTLM_FLOAT16
	Float32  Dtype = C.PTLM_FLOAT32
	Float64  Dtype = C.PTLM_FLOAT64
	BFloat16 Dtype = C.PTLM_BFLOAT16
)

var dtypeInfo = map[Dtype]struct {
	name string
	size int
}{
	Bool: {"bool", 1}, Uint8: {"uint8", 1}, Uint16: {"uint16", 2}, Uint32: {"uint32", 4},
	Uint64: {"uint64", 8}, Int8: {"int8", 1}, Int16: {"int16", 2}, Int32: {"int32", 4},
	Int64: {"int64", 8}, Float16: {"float16", 2}, Float32: {"float32", 4},
	Float64: {"float64", 8}, BFloat16: {"bfloat16", 2},
}

// String returns the dtype's MLX name, e.g. "bfloat16".
func (d Dtype) String() string {
	if i, ok := dtypeInfo[d]; ok {
		return i.name
	}
	return fmt.Sprintf("dtype(%d)", int(d))
}

// Size is the number of bytes of one element.
func (d Dtype) Size() int { return dtypeInfo[d].size }

// IsFloat reports whether d is a floating-point type.
func (d Dtype) IsFloat() bool {
	return d == Float16 || d == Float32 || d == Float64 || d == BFloat16
}

// ParseDtype maps a dtype name ("float32", "bfloat16", "bf16", "fp16", …) to a Dtype.
func ParseDtype(name string) (Dtype, error) {
	switch name {
	case "bf16":
		return BFloat16, nil
	case "fp16", "half":
		return Float16, nil
	case "fp32", "float":
		return Float32, nil
	}
	for d, i := range dtypeInfo {
		if i.name == name {
			return d, nil
		}
	}
	return 0, fmt.Errorf("unknown dtype %q: want one of float32, bfloat16, float16, int32, int64, uint32, bool", name)
}
