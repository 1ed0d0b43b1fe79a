// bridge_kernelcache.cpp: custom CUDA kernels' compiled code kept in MLX's
// kernel cache, so that only the first process compiles them.
//
// MLX 0.32.4 compiles a custom kernel (fast::cuda_kernel) with NVRTC in
// every process and does not write it to its kernel cache
// (MLX_PTX_CACHE_DIR), but before compiling any kernel, its own or a
// custom one, it looks there for a module of the kernel's name: a cubin
// NAME.ptx and NAME.txt, which maps the kernel's name to its lowered
// (mangled) symbol. So the first time a process applies a custom kernel
// with a set of template arguments, the bridge looks for that module, and
// when it is missing compiles the kernel itself with the signature MLX
// generates (an input's pointer for each input, an output's pointer for
// each output, the template arguments as constants of the body) and writes
// the module under MLX's name for it. MLX then loads it instead of
// compiling, in this process and in every later one. NVRTC is opened at
// run time (dlopen): the library is there wherever MLX's CUDA backend is.
#include "bridge_kernelcache.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <unordered_set>

#include "mlx/backend/cuda/cuda.h"

namespace mx = mlx::core;
namespace fs = std::filesystem;

namespace ptlm {
namespace {

using nvrtcProgram = struct ptlm_nvrtc_program*;
using nvrtcResult = int;  // NVRTC_SUCCESS is 0

// Nvrtc holds the NVRTC entry points the cache needs; ok is false where
// the library cannot be opened.
struct Nvrtc {
  nvrtcResult (*create)(nvrtcProgram*, const char*, const char*, int, const char* const*, const char* const*);
  nvrtcResult (*add_name)(nvrtcProgram, const char*);
  nvrtcResult (*compile)(nvrtcProgram, int, const char* const*);
  nvrtcResult (*lowered)(nvrtcProgram, const char*, const char**);
  nvrtcResult (*cubin_size)(nvrtcProgram, size_t*);
  nvrtcResult (*cubin)(nvrtcProgram, char*);
  nvrtcResult (*destroy)(nvrtcProgram*);
  bool ok = false;
};

template <typename F>
void bind(void* lib, const char* name, F& f, bool& ok) {
  f = reinterpret_cast<F>(dlsym(lib, name));
  ok = ok && f != nullptr;
}

const Nvrtc& nvrtc() {
  static const Nvrtc n = [] {
    Nvrtc n{};
    void* lib = nullptr;
    for (const char* name : {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"}) {
      if ((lib = dlopen(name, RTLD_NOW | RTLD_LOCAL)) != nullptr) break;
    }
    if (lib == nullptr) return n;
    bool ok = true;
    bind(lib, "nvrtcCreateProgram", n.create, ok);
    bind(lib, "nvrtcAddNameExpression", n.add_name, ok);
    bind(lib, "nvrtcCompileProgram", n.compile, ok);
    bind(lib, "nvrtcGetLoweredName", n.lowered, ok);
    bind(lib, "nvrtcGetCUBINSize", n.cubin_size, ok);
    bind(lib, "nvrtcGetCUBIN", n.cubin, ok);
    bind(lib, "nvrtcDestroyProgram", n.destroy, ok);
    n.ok = ok;
    return n;
  }();
  return n;
}

// cache_dir is the folder MLX reads its kernel cache from: the variable,
// else MLX's default in the temporary directory.
fs::path cache_dir() {
  if (const char* c = std::getenv("MLX_PTX_CACHE_DIR"); c != nullptr && *c != '\0') return c;
  return fs::temp_directory_path() / "mlx" / mx::version() / "ptx";
}

// include_paths are NVRTC's include folders, as MLX gives them: CUDA's
// C++ library (CCCL: cuda/std, nv/target, which CUDA 13's headers need)
// beside libmlx.so (its include/cccl) or at MLX_CCCL_DIR, then the CUDA
// toolkit's include/cccl and include (CUDA_HOME, CUDA_PATH or
// /usr/local/cuda). Empty when there is no toolkit.
std::vector<std::string> include_paths() {
  std::vector<std::string> paths;
  Dl_info info;
  if (dladdr(reinterpret_cast<void*>(&mx::version), &info) != 0 && info.dli_fname != nullptr) {
    fs::path cccl = fs::path(info.dli_fname).parent_path().parent_path() / "include" / "cccl";
    if (fs::exists(cccl)) paths.push_back(cccl.string());
  }
  if (const char* c = std::getenv("MLX_CCCL_DIR"); c != nullptr && *c != '\0' && fs::exists(c)) paths.push_back(c);
  std::string cuda;
  for (const char* v : {"CUDA_HOME", "CUDA_PATH"}) {
    if (const char* h = std::getenv(v); cuda.empty() && h != nullptr && *h != '\0') cuda = std::string(h) + "/include";
  }
  if (cuda.empty() && fs::exists("/usr/local/cuda/include")) cuda = "/usr/local/cuda/include";
  if (cuda.empty()) return {};
  if (fs::exists(cuda + "/cccl")) paths.push_back(cuda + "/cccl");
  paths.push_back(cuda);
  return paths;
}

// cuda_type is the CUDA type of a dtype's elements, "" for one this cache
// does not handle (the kernel is then left to MLX).
std::string cuda_type(mx::Dtype d) {
  if (d == mx::float32) return "float";
  if (d == mx::float16) return "__half";
  if (d == mx::bfloat16) return "__nv_bfloat16";
  if (d == mx::int32) return "int";
  if (d == mx::uint32) return "unsigned int";
  if (d == mx::int64) return "long long";
  if (d == mx::uint64) return "unsigned long long";
  if (d == mx::int16) return "short";
  if (d == mx::uint16) return "unsigned short";
  if (d == mx::int8) return "signed char";
  if (d == mx::uint8) return "unsigned char";
  if (d == mx::bool_) return "bool";
  return "";
}

// write_file writes data to path through a temporary file renamed into
// place, so that a reader sees the whole file or none.
bool write_file(const fs::path& path, const std::string& data) {
  fs::path tmp = path;
  tmp += ".tmp" + std::to_string(getpid());
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f.write(data.data(), static_cast<std::streamsize>(data.size()))) return false;
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) fs::remove(tmp, ec);
  return !ec;
}

// compile_module compiles source for the GPU's architecture and writes the
// module NAME.ptx (the cubin) and NAME.txt (kernel name, tab, lowered name)
// into dir; false when any step fails.
bool compile_module(const fs::path& dir, const std::string& module, const std::string& kernel,
                    const std::string& source) {
  const Nvrtc& n = nvrtc();
  std::vector<std::string> includes = include_paths();
  if (!n.ok || includes.empty()) return false;
  auto& info = mx::device_info(mx::Device(mx::Device::gpu));
  auto major = info.find("compute_capability_major"), minor = info.find("compute_capability_minor");
  if (major == info.end() || minor == info.end() || !std::holds_alternative<size_t>(major->second) ||
      !std::holds_alternative<size_t>(minor->second)) {
    return false;
  }
  std::string arch = "--gpu-architecture=sm_" + std::to_string(std::get<size_t>(major->second)) +
                     std::to_string(std::get<size_t>(minor->second));
  std::vector<std::string> args = {arch};
  for (const auto& p : includes) args.push_back("--include-path=" + p);
  std::vector<const char*> opts;
  for (const auto& a : args) opts.push_back(a.c_str());

  nvrtcProgram prog = nullptr;
  if (n.create(&prog, source.c_str(), (module + ".cu").c_str(), 0, nullptr, nullptr) != 0) return false;
  std::string lowered, cubin;
  bool ok = n.add_name(prog, kernel.c_str()) == 0 && n.compile(prog, static_cast<int>(opts.size()), opts.data()) == 0;
  if (ok) {
    const char* l = nullptr;
    size_t size = 0;
    ok = n.lowered(prog, kernel.c_str(), &l) == 0 && l != nullptr && n.cubin_size(prog, &size) == 0 && size > 0;
    if (ok) {
      lowered = l;
      cubin.resize(size);
      ok = n.cubin(prog, cubin.data()) == 0;
    }
  }
  n.destroy(&prog);
  if (!ok) return false;
  std::error_code ec;
  fs::create_directories(dir, ec);
  // MLX opens NAME.ptx first and then reads NAME.txt: the map goes in first.
  return write_file(dir / (module + ".txt"), kernel + "\t" + lowered + "\n") &&
         write_file(dir / (module + ".cu"), source) && write_file(dir / (module + ".ptx"), cubin);
}

}  // namespace

void cache_custom_kernel(const CustomKernelDef& def, const std::vector<mx::array>& inputs,
                         const std::vector<mx::Dtype>& out_dtypes,
                         const std::vector<std::pair<std::string, int>>& targs) {
  try {
    if (mx::default_device() != mx::Device::gpu || !mx::cu::is_available()) return;
    // MLX's module name: custom_kernel_NAME, then _VALUE per template argument.
    std::string module = "custom_kernel_" + def.name;
    for (const auto& [_, v] : targs) module += "_" + std::to_string(v);
    static std::mutex mu;
    static std::unordered_set<std::string> tried;  // per process: one attempt per module
    std::lock_guard<std::mutex> lock(mu);
    if (!tried.insert(module).second) return;
    fs::path dir = cache_dir();
    if (fs::exists(dir / (module + ".ptx"))) return;

    // MLX passes an input's shape, strides or ndim when the source names
    // them; such kernels are left to MLX.
    for (const auto& in : def.inputs) {
      for (const char* suffix : {"_shape", "_strides", "_ndim"}) {
        if (def.source.find(in + suffix) != std::string::npos) return;
      }
    }
    std::string src =
        "#include <cuda_fp16.h>\n#include <cuda_bf16.h>\n#include <cooperative_groups.h>\n" + def.header +
        "\nnamespace mlx::core::cu {\n\nnamespace cg = cooperative_groups;\n\n__global__ void " + module + "(\n";
    for (size_t i = 0; i < def.inputs.size(); i++) {
      std::string t = cuda_type(inputs[i].dtype());
      if (t.empty()) return;
      src += "    const " + t + "* " + def.inputs[i] + ",\n";
    }
    for (size_t i = 0; i < def.outputs.size(); i++) {
      std::string t = cuda_type(out_dtypes[i]);
      if (t.empty()) return;
      src += "    " + t + "* " + def.outputs[i] + (i + 1 < def.outputs.size() ? ",\n" : ") {\n");
    }
    for (const auto& [name, v] : targs) src += "  constexpr int " + name + " = " + std::to_string(v) + ";\n";
    src += "\n" + def.source + "\n}\n\n} // namespace mlx::core::cu\n";
    compile_module(dir, module, "mlx::core::cu::" + module, src);
  } catch (...) {
    // MLX compiles the kernel itself, as without the cache.
  }
}

}  // namespace ptlm
