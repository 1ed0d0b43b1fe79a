// bridge_internal.h holds the C++ helpers shared by the bridge's .cpp files.
#ifndef PTLM_MLX_BRIDGE_INTERNAL_H
#define PTLM_MLX_BRIDGE_INTERNAL_H

#include <exception>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "mlx/mlx.h"
#include "bridge.h"

namespace mx = mlx::core;

namespace ptlm {

void set_error(const std::string& msg);

// on_mlx_thread is true only on the thread that ptlm_claim_thread marked:
// MLX keeps streams, the compile cache and the random key per OS thread, so
// every entry point refuses to run anywhere else. constinit lets other
// translation units read it directly, without a TLS wrapper call.
inline constinit thread_local bool on_mlx_thread = false;

// off_thread_error is the message of a call refused because it came from
// another thread: what happened, and how to call the bridge instead.
std::string off_thread_error(const char* fn);

inline mx::array& A(ptlm_array a) {
  if (a == nullptr) throw std::invalid_argument("nil array handle");
  return *reinterpret_cast<mx::array*>(a);
}
inline ptlm_array wrap(mx::array a) {
  return reinterpret_cast<ptlm_array>(new mx::array(std::move(a)));
}
inline std::optional<mx::array> opt(ptlm_array a) {
  if (a == nullptr) return std::nullopt;
  return A(a);
}
inline std::vector<mx::array>& V(ptlm_vec v) {
  return *reinterpret_cast<std::vector<mx::array>*>(v);
}
inline ptlm_vec wrap_vec(std::vector<mx::array> v) {
  return reinterpret_cast<ptlm_vec>(new std::vector<mx::array>(std::move(v)));
}
inline std::vector<mx::array> arrays(const ptlm_array* a, size_t n) {
  std::vector<mx::array> out;
  out.reserve(n);
  for (size_t i = 0; i < n; i++) out.push_back(A(a[i]));
  return out;
}
inline mx::Shape shape_of(const int* s, int n) { return mx::Shape(s, s + n); }
inline std::vector<int> ints(const int* s, int n) { return std::vector<int>(s, s + n); }
mx::Dtype dtype_of(int d);
int dtype_code(mx::Dtype d);

}  // namespace ptlm

// PTLM_TRY runs body on the MLX thread and turns any C++ exception into
// PTLM_FAILED with the thread-local error string set. Called from any other
// thread it does nothing but set the error and return PTLM_OFF_THREAD, so
// the caller can hand the call to the MLX thread and make it again there.
#define PTLM_TRY(...)                                      \
  if (!ptlm::on_mlx_thread) {                              \
    ptlm::set_error(ptlm::off_thread_error(__func__));     \
    return PTLM_OFF_THREAD;                                \
  }                                                        \
  try {                                                    \
    __VA_ARGS__;                                           \
    return PTLM_OK;                                        \
  } catch (const std::exception& e) {                      \
    ptlm::set_error(e.what());                             \
    return PTLM_FAILED;                                    \
  } catch (...) {                                          \
    ptlm::set_error("unknown C++ exception");              \
    return PTLM_FAILED;                                    \
  }

#endif
