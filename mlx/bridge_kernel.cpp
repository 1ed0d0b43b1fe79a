// bridge_kernel.cpp: custom CUDA kernels (mlx::core::fast::cuda_kernel).
#include "mlx/backend/cuda/cuda.h"
#include "mlx/fast.h"
#include "bridge_internal.h"

using namespace ptlm;

namespace {

mx::fast::CustomKernelFunction& K(ptlm_kernel k) {
  if (k == nullptr) throw std::invalid_argument("nil kernel handle");
  return *reinterpret_cast<mx::fast::CustomKernelFunction*>(k);
}

std::vector<std::string> strings(const char** s, size_t n) { return std::vector<std::string>(s, s + n); }

}  // namespace

extern "C" {

int ptlm_cuda_available(bool* out) { PTLM_TRY(*out = mx::cu::is_available()) }

int ptlm_cuda_kernel_new(const char* name, const char** inputs, size_t n_in, const char** outputs, size_t n_out,
                         const char* source, const char* header, ptlm_kernel* out) {
  PTLM_TRY({
    auto fn = mx::fast::cuda_kernel(name, strings(inputs, n_in), strings(outputs, n_out), source, header,
                                    /*ensure_row_contiguous=*/true, /*shared_memory=*/0);
    *out = reinterpret_cast<ptlm_kernel>(new mx::fast::CustomKernelFunction(std::move(fn)));
  })
}

int ptlm_kernel_free(ptlm_kernel k) { PTLM_TRY(delete reinterpret_cast<mx::fast::CustomKernelFunction*>(k)) }

int ptlm_kernel_apply(ptlm_kernel k, const ptlm_array* in, size_t n_in, const int* shapes, const int* ndims,
                      const int* dtypes, size_t n_out, const int* grid, const int* group, const char** tnames,
                      const int* tvalues, size_t n_t, ptlm_vec* out) {
  PTLM_TRY({
    std::vector<mx::Shape> out_shapes;
    std::vector<mx::Dtype> out_dtypes;
    for (size_t i = 0, at = 0; i < n_out; at += ndims[i], i++) {
      out_shapes.push_back(shape_of(shapes + at, ndims[i]));
      out_dtypes.push_back(dtype_of(dtypes[i]));
    }
    std::vector<std::pair<std::string, mx::fast::TemplateArg>> targs;
    for (size_t i = 0; i < n_t; i++) targs.emplace_back(tnames[i], tvalues[i]);
    *out = wrap_vec(K(k)(arrays(in, n_in), out_shapes, out_dtypes, {grid[0], grid[1], grid[2]},
                         {group[0], group[1], group[2]}, targs, std::nullopt, false, {}));
  })
}

}  // extern "C"
