// bridge_kernel.cpp: custom CUDA kernels (mlx::core::fast::cuda_kernel).
#include "mlx/backend/cuda/cuda.h"
#include "mlx/fast.h"
#include "bridge_internal.h"
#include "bridge_kernelcache.h"

using namespace ptlm;

namespace {

// Kernel is a kernel handle: MLX's function, and what it was defined
// with, for the kernel cache (cache_custom_kernel).
struct Kernel {
  mx::fast::CustomKernelFunction fn;
  CustomKernelDef def;
};

Kernel& K(ptlm_kernel k) {
  if (k == nullptr) throw std::invalid_argument("nil kernel handle");
  return *reinterpret_cast<Kernel*>(k);
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
    *out = reinterpret_cast<ptlm_kernel>(new Kernel{std::move(fn), CustomKernelDef{name, source, header,
                                                                                    strings(inputs, n_in),
                                                                                    strings(outputs, n_out)}});
  })
}

int ptlm_kernel_free(ptlm_kernel k) { PTLM_TRY(delete reinterpret_cast<Kernel*>(k)) }

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
    std::vector<std::pair<std::string, int>> ints;
    for (size_t i = 0; i < n_t; i++) {
      targs.emplace_back(tnames[i], tvalues[i]);
      ints.emplace_back(tnames[i], tvalues[i]);
    }
    Kernel& kernel = K(k);
    auto inputs = arrays(in, n_in);
    if (inputs.size() == kernel.def.inputs.size() && out_dtypes.size() == kernel.def.outputs.size()) {
      cache_custom_kernel(kernel.def, inputs, out_dtypes, ints);
    }
    *out = wrap_vec(kernel.fn(inputs, out_shapes, out_dtypes, {grid[0], grid[1], grid[2]},
                              {group[0], group[1], group[2]}, targs, std::nullopt, false, {}));
  })
}

}  // extern "C"
