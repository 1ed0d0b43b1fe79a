// bridge_linalg.h: linear algebra that MLX runs on the CPU stream only.
#ifndef PTLM_BRIDGE_LINALG_H
#define PTLM_BRIDGE_LINALG_H

#include "bridge.h"

#ifdef __cplusplus
extern "C" {
#endif

// ptlm_svd_cpu: U, S, Vt of the 2-D array a, on the CPU stream (MLX has
// no GPU SVD). *out holds three arrays.
int ptlm_svd_cpu(ptlm_array a, ptlm_vec* out);

#ifdef __cplusplus
}
#endif

#endif
