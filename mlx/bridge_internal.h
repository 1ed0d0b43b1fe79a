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

// PTLM_TRY runs body and turns any C++ exception into a non-zero status with
// the thread-local error string set.
#define PTLM_TRY(...)                                    \
  try {                                                  \
    __VA_ARGS__;                                         \
    return 0;                                            \
  } catch (const std::exception& e) {                    \
    ptlm::set_error(e.what());                           \
    return 1;                                            \
  } catch (...) {                                        \
    ptlm::set_error("unknown C++ exception");            \
    return 1;                                            \
  }

#endif
