package mlx

/*
#include "bridge.h"
*/
import "C"

import "fmt"

// RandomKey returns a PRNG key for seed. Random functions take explicit keys
// so runs are reproducible and traceable into compiled functions.
func RandomKey(seed uint64) *Array {
	var h C.ptlm_array
	onThread, err := call(func() C.int { return C.ptlm_random_key(C.uint64_t(seed), &h) })
	if err != nil {
		return errArray(check("random.key", err))
	}
	return newArray(h, onThread)
}

// RandomSplit splits key into num independent keys.
func RandomSplit(key *Array, num int) []*Array {
	keys := unary("random.split", key, func(k C.ptlm_array, o *C.ptlm_array) C.int {
		return C.ptlm_random_split(k, C.int(num), o)
	})
	defer keys.Free()
	if err := keys.Err(); err != nil {
		return errArrays(num, err)
	}
	out := make([]*Array, num)
	for i := range out {
		row := Slice(keys, []int{i, 0}, []int{i + 1, 2})
		out[i] = Squeeze(row, 0)
		row.Free()
	}
	return out
}

func random(op string, shape []int, dtype Dtype, key *Array, f func(*C.int, C.int, C.int, C.ptlm_array, *C.ptlm_array) C.int) *Array {
	if err := optionalErr(key); err != nil {
		return errArray(err)
	}
	sh := cInts(shape)
	var h C.ptlm_array
	onThread, err := call(func() C.int { return f(&sh[0], C.int(len(shape)), C.int(dtype), handleOrNil(key), &h) })
	if err != nil {
		return errArray(&Error{Op: op, Operands: dtype.String() + shapeString(shape), Msg: err.Error()})
	}
	return newArray(h, onThread)
}

// RandomNormal samples N(loc, scale²) with the given key (nil uses MLX's
// global key sequence).
func RandomNormal(shape []int, dtype Dtype, loc, scale float32, key *Array) *Array {
	return random("random.normal", shape, dtype, key, func(s *C.int, n, d C.int, k C.ptlm_array, o *C.ptlm_array) C.int {
		return C.ptlm_random_normal(s, n, d, C.float(loc), C.float(scale), k, o)
	})
}

// RandomUniform samples U[low, high) with the given key.
func RandomUniform(shape []int, dtype Dtype, low, high float32, key *Array) *Array {
	if !(low < high) {
		return errArray(&Error{Op: "random.uniform", Msg: fmt.Sprintf("low %g must be below high %g", low, high)})
	}
	return random("random.uniform", shape, dtype, key, func(s *C.int, n, d C.int, k C.ptlm_array, o *C.ptlm_array) C.int {
		return C.ptlm_random_uniform(s, n, d, C.float(low), C.float(high), k, o)
	})
}

// RandomCategorical samples indices along axis from unnormalised log
// probabilities.
func RandomCategorical(logits *Array, axis int, key *Array) *Array {
	if err := optionalErr(key); err != nil {
		return errArray(err)
	}
	return unary("random.categorical", logits, func(l C.ptlm_array, o *C.ptlm_array) C.int {
		return C.ptlm_random_categorical(l, C.int(axis), handleOrNil(key), o)
	})
}
