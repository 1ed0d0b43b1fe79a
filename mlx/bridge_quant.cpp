// bridge_quant.cpp: affine quantization (quantize, dequantize,
// quantized_matmul). Every function catches all C++ exceptions (PTLM_TRY).
#include "bridge_internal.h"
#include "bridge_quant.h"

using namespace ptlm;

extern "C" {

int ptlm_quantize(ptlm_array w, int group_size, int bits, ptlm_vec* out) {
  PTLM_TRY(*out = wrap_vec(mx::quantize(A(w), group_size, bits, "affine")))
}

int ptlm_dequantize(ptlm_array w, ptlm_array scales, ptlm_array biases, int group_size, int bits,
                    ptlm_array* out) {
  PTLM_TRY(*out = wrap(mx::dequantize(A(w), A(scales), opt(biases), group_size, bits, "affine")))
}

int ptlm_quantized_matmul(ptlm_array x, ptlm_array w, ptlm_array scales, ptlm_array biases, bool transpose,
                          int group_size, int bits, ptlm_array* out) {
  PTLM_TRY(*out = wrap(mx::quantized_matmul(A(x), A(w), A(scales), opt(biases), transpose, group_size, bits,
                                            "affine")))
}

}  // extern "C"
