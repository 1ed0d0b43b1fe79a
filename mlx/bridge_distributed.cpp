// bridge_distributed.cpp: MLX's distributed layer (mlx/distributed): the
// group of processes a backend connects, and its collectives as ops. Every
// function catches all C++ exceptions (PTLM_TRY).
#include "bridge_internal.h"

namespace mxd = mlx::core::distributed;

using namespace ptlm;

namespace {

mxd::Group& G(ptlm_group g) {
  if (g == nullptr) throw std::invalid_argument("nil group handle");
  return *reinterpret_cast<mxd::Group*>(g);
}

}  // namespace

extern "C" {

int ptlm_distributed_available(const char* backend, bool* out) {
  PTLM_TRY(*out = mxd::is_available(std::string(backend)))
}
int ptlm_distributed_init(bool strict, const char* backend, ptlm_group* out) {
  PTLM_TRY(*out = reinterpret_cast<ptlm_group>(new mxd::Group(mxd::init(strict, std::string(backend)))))
}
int ptlm_group_free(ptlm_group g) { PTLM_TRY(delete reinterpret_cast<mxd::Group*>(g)) }
int ptlm_group_rank(ptlm_group g, int* out) { PTLM_TRY(*out = G(g).rank()) }
int ptlm_group_size(ptlm_group g, int* out) { PTLM_TRY(*out = G(g).size()) }
int ptlm_all_sum(ptlm_array a, ptlm_group g, ptlm_array* out) { PTLM_TRY(*out = wrap(mxd::all_sum(A(a), G(g)))) }
int ptlm_all_max(ptlm_array a, ptlm_group g, ptlm_array* out) { PTLM_TRY(*out = wrap(mxd::all_max(A(a), G(g)))) }
int ptlm_all_gather(ptlm_array a, ptlm_group g, ptlm_array* out) {
  PTLM_TRY(*out = wrap(mxd::all_gather(A(a), G(g))))
}

}  // extern "C"
