// bridge_quant.h: affine quantization of matrices and the checkpoint
// transform, the memory tools of fine-tuning. Same conventions as bridge.h.
#ifndef PTLM_BRIDGE_QUANT_H
#define PTLM_BRIDGE_QUANT_H

#include "bridge.h"

#ifdef __cplusplus
extern "C" {
#endif

// ptlm_quantize: w [..., n] quantized along its last axis in groups of
// group_size with bits bits per value (mode "affine"). *out holds three
// arrays: the packed uint32 weights [..., n·bits/32], the scales and the
// biases [..., n/group_size], the last two in w's dtype.
int ptlm_quantize(ptlm_array w, int group_size, int bits, ptlm_vec* out);
// ptlm_dequantize: the matrix ptlm_quantize packed, in the scales' dtype.
int ptlm_dequantize(ptlm_array w, ptlm_array scales, ptlm_array biases, int group_size, int bits,
                    ptlm_array* out);
// ptlm_quantized_matmul: x·Wᵀ (transpose) or x·W of the dequantized W,
// without forming it.
int ptlm_quantized_matmul(ptlm_array x, ptlm_array w, ptlm_array scales, ptlm_array biases, bool transpose,
                          int group_size, int bits, ptlm_array* out);
// ptlm_checkpoint: c whose intermediate arrays are not kept for the
// backward pass but recomputed from its inputs there (mx::checkpoint).
// Defined in bridge_core.cpp beside the other closure transforms.
int ptlm_checkpoint(ptlm_closure c, ptlm_closure* out);

#ifdef __cplusplus
}
#endif

#endif
