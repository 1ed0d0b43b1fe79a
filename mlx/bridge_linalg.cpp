// bridge_linalg.cpp: linear algebra on the CPU stream. Every function
// catches all C++ exceptions (PTLM_TRY).
#include "bridge_internal.h"
#include "bridge_linalg.h"

using namespace ptlm;

extern "C" {

int ptlm_svd_cpu(ptlm_array a, ptlm_vec* out) {
  PTLM_TRY(*out = wrap_vec(mx::linalg::svd(A(a), true, mx::Device(mx::Device::cpu))))
}

}  // extern "C"
