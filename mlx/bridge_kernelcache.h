// bridge_kernelcache.h: custom CUDA kernels' compiled code kept in MLX's
// kernel cache across processes (bridge_kernelcache.cpp).
#ifndef PTLM_MLX_BRIDGE_KERNELCACHE_H
#define PTLM_MLX_BRIDGE_KERNELCACHE_H

#include <string>
#include <utility>
#include <vector>

#include "mlx/mlx.h"

namespace ptlm {

// CustomKernelDef is what a custom kernel was defined with: what MLX
// generates its source from.
struct CustomKernelDef {
  std::string name, source, header;
  std::vector<std::string> inputs, outputs;
};

// cache_custom_kernel makes sure MLX's kernel cache holds the compiled
// code of def applied to inputs with out_dtypes and the integer template
// arguments targs, compiling it with NVRTC when it does not. It never
// throws: a kernel it cannot compile is left to MLX, which compiles it
// for this process as before.
void cache_custom_kernel(const CustomKernelDef& def, const std::vector<mlx::core::array>& inputs,
                         const std::vector<mlx::core::Dtype>& out_dtypes,
                         const std::vector<std::pair<std::string, int>>& targs);

}  // namespace ptlm

#endif
