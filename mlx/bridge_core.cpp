// bridge_core.cpp: errors, array handles, vectors, closures and transforms,
// devices, memory and safetensors I/O.
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <unordered_map>
#include <unordered_set>

#include "bridge_internal.h"
#include "bridge_quant.h"
#include "mlx/primitives.h"

using namespace ptlm;

namespace ptlm {

static thread_local std::string last_error;
static std::atomic<bool> thread_claimed{false};

void set_error(const std::string& msg) { last_error = msg; }

std::string off_thread_error(const char* fn) {
  return std::string(fn) +
         " called off the MLX thread: MLX keeps streams, the compile cache and the random key per OS thread, so "
         "the bridge runs only on the thread that ptlm_claim_thread marked; call it through the Go package mlx, "
         "which hands calls to that thread (mlx.Do)";
}

mx::Dtype dtype_of(int d) {
  switch (d) {
    case PTLM_BOOL: return mx::bool_;
    case PTLM_UINT8: return mx::uint8;
    case PTLM_UINT16: return mx::uint16;
    case PTLM_UINT32: return mx::uint32;
    case PTLM_UINT64: return mx::uint64;
    case PTLM_INT8: return mx::int8;
    case PTLM_INT16: return mx::int16;
    case PTLM_INT32: return mx::int32;
    case PTLM_INT64: return mx::int64;
    case PTLM_FLOAT16: return mx::float16;
    case PTLM_FLOAT32: return mx::float32;
    case PTLM_FLOAT64: return mx::float64;
    case PTLM_BFLOAT16: return mx::bfloat16;
    case PTLM_COMPLEX64: return mx::complex64;
  }
  throw std::invalid_argument("unknown dtype code " + std::to_string(d));
}

int dtype_code(mx::Dtype d) { return static_cast<int>(d.val()); }

}  // namespace ptlm

extern "C" {

const char* ptlm_last_error(void) { return last_error.c_str(); }
void ptlm_set_error(const char* msg) { set_error(msg ? msg : ""); }
int ptlm_claim_thread(void) {
  if (on_mlx_thread) return 0;
  if (thread_claimed.exchange(true)) return 1;
  on_mlx_thread = true;
  return 0;
}
int ptlm_on_mlx_thread(void) { return on_mlx_thread ? 1 : 0; }

int ptlm_array_free(ptlm_array a) { PTLM_TRY(delete reinterpret_cast<mx::array*>(a)) }

static mx::array array_from_data(const void* data, int dtype, mx::Shape sh) {
  switch (dtype) {
#define PTLM_FROM(code, T) \
  case code:               \
    return mx::array(static_cast<const T*>(data), std::move(sh), dtype_of(code));
    PTLM_FROM(PTLM_BOOL, bool)
    PTLM_FROM(PTLM_UINT8, uint8_t)
    PTLM_FROM(PTLM_UINT16, uint16_t)
    PTLM_FROM(PTLM_UINT32, uint32_t)
    PTLM_FROM(PTLM_UINT64, uint64_t)
    PTLM_FROM(PTLM_INT8, int8_t)
    PTLM_FROM(PTLM_INT16, int16_t)
    PTLM_FROM(PTLM_INT32, int32_t)
    PTLM_FROM(PTLM_INT64, int64_t)
    PTLM_FROM(PTLM_FLOAT16, mx::float16_t)
    PTLM_FROM(PTLM_FLOAT32, float)
    PTLM_FROM(PTLM_BFLOAT16, mx::bfloat16_t)
#undef PTLM_FROM
  }
  throw std::invalid_argument("cannot build an array of dtype code " + std::to_string(dtype) + " from host data");
}

int ptlm_array_from_data(const void* data, int dtype, const int* shape, int ndim, ptlm_array* out) {
  PTLM_TRY(*out = wrap(array_from_data(data, dtype, shape_of(shape, ndim))))
}

int ptlm_array_from_float(double v, int dtype, ptlm_array* out) {
  PTLM_TRY(*out = wrap(mx::array(static_cast<float>(v), dtype_of(dtype))))
}

int ptlm_array_from_int(int64_t v, int dtype, ptlm_array* out) {
  PTLM_TRY(*out = wrap(mx::astype(mx::array(v, mx::int64), dtype_of(dtype))))
}

int ptlm_array_info(ptlm_array a, int* dtype, int* ndim, int* shape, int max_ndim) {
  PTLM_TRY({
    auto& x = A(a);
    *dtype = dtype_code(x.dtype());
    *ndim = static_cast<int>(x.ndim());
    for (int i = 0; i < *ndim && i < max_ndim; i++) shape[i] = x.shape(i);
  })
}

int ptlm_array_read(ptlm_array a, void* dst, size_t nbytes) {
  PTLM_TRY({
    // An array already scheduled (async_eval) is waited for alone; a new
    // operation on it (contiguous) would be evaluated behind everything
    // queued since, so it is made only for an array not in row order.
    auto x = A(a);
    x.eval();
    if (!x.flags().row_contiguous) {
      x = mx::contiguous(x);
      x.eval();
    }
    if (x.nbytes() != nbytes)
      throw std::invalid_argument("read of " + std::to_string(x.nbytes()) + " bytes into a buffer of " +
                                  std::to_string(nbytes));
    if (nbytes > 0) std::memcpy(dst, x.data<char>(), nbytes);
  })
}

int ptlm_array_row_contiguous(ptlm_array a, bool* out) {
  PTLM_TRY({
    auto& x = A(a);
    x.eval();
    *out = x.flags().row_contiguous;
  })
}

int ptlm_eval(const ptlm_array* arrs, size_t n) { PTLM_TRY(mx::eval(arrays(arrs, n))) }

int ptlm_graph_ops(const ptlm_array* arrs, size_t n, char** out) {
  PTLM_TRY({
    std::unordered_set<std::uintptr_t> seen;
    std::map<std::string, size_t> counts;
    std::vector<mx::array> stack = arrays(arrs, n);
    while (!stack.empty()) {
      mx::array a = std::move(stack.back());
      stack.pop_back();
      if (!a.has_primitive() || !seen.insert(a.id()).second) continue;
      for (auto& s : a.siblings()) seen.insert(s.id());  // one primitive, several outputs
      counts[a.primitive().name()]++;
      for (auto& in : a.inputs()) stack.push_back(in);
    }
    std::string text;
    for (auto& [name, count] : counts) text += name + " " + std::to_string(count) + "\n";
    *out = static_cast<char*>(std::malloc(text.size() + 1));
    if (*out == nullptr) throw std::bad_alloc();
    std::memcpy(*out, text.c_str(), text.size() + 1);
  })
}
int ptlm_async_eval(const ptlm_array* arrs, size_t n) { PTLM_TRY(mx::async_eval(arrays(arrs, n))) }

int ptlm_vec_new(ptlm_vec* out) { PTLM_TRY(*out = wrap_vec({})) }
int ptlm_vec_free(ptlm_vec v) { PTLM_TRY(delete reinterpret_cast<std::vector<mx::array>*>(v)) }
int ptlm_vec_push(ptlm_vec v, ptlm_array a) { PTLM_TRY(V(v).push_back(A(a))) }
int ptlm_vec_size(ptlm_vec v, size_t* out) { PTLM_TRY(*out = V(v).size()) }
int ptlm_vec_move_all(ptlm_vec v, ptlm_array* dst) {
  PTLM_TRY({
    auto& vec = V(v);
    for (size_t i = 0; i < vec.size(); i++) dst[i] = wrap(std::move(vec[i]));
    vec.clear();
  })
}

}  // extern "C"

namespace {

using VecFn = std::function<std::vector<mx::array>(const std::vector<mx::array>&)>;

// Payload owns a Go callback's handle; its destructor tells Go to drop it.
struct Payload {
  ptlm_closure_fn fn;
  uintptr_t payload;
  ptlm_payload_dtor dtor;
  ~Payload() {
    if (dtor) dtor(payload);
  }
};

struct Closure {
  VecFn fn;
};

// VJPPayload owns a Go custom-VJP callback's handle, like Payload.
struct VJPPayload {
  ptlm_vjp_fn fn;
  uintptr_t payload;
  ptlm_payload_dtor dtor;
  ~VJPPayload() {
    if (dtor) dtor(payload);
  }
};

Closure& C(ptlm_closure c) {
  if (c == nullptr) throw std::invalid_argument("nil closure handle");
  return *reinterpret_cast<Closure*>(c);
}

ptlm_closure wrap_closure(VecFn fn) { return reinterpret_cast<ptlm_closure>(new Closure{std::move(fn)}); }

using VagFn = mx::ValueAndGradFn;

}  // namespace

extern "C" {

int ptlm_closure_new(ptlm_closure_fn fn, uintptr_t payload, ptlm_payload_dtor dtor, ptlm_closure* out) {
  PTLM_TRY({
    auto p = std::shared_ptr<Payload>(new Payload{fn, payload, dtor});
    *out = wrap_closure([p](const std::vector<mx::array>& in) {
      std::vector<ptlm_array> handles(in.size());
      for (size_t i = 0; i < in.size(); i++)
        handles[i] = reinterpret_cast<ptlm_array>(const_cast<mx::array*>(&in[i]));
      std::vector<mx::array> outs;
      int rc = p->fn(p->payload, handles.data(), handles.size(), reinterpret_cast<ptlm_vec>(&outs));
      if (rc != 0) throw std::runtime_error(last_error);
      return outs;
    });
  })
}

int ptlm_closure_free(ptlm_closure c) { PTLM_TRY(delete reinterpret_cast<Closure*>(c)) }

int ptlm_closure_apply(ptlm_closure c, const ptlm_array* in, size_t n, ptlm_vec* out) {
  PTLM_TRY({
    // Create this thread's default stream before a compiled function looks
    // up its trace cache: in MLX 0.32 the first compiled call on a thread
    // that has no stream yet files its trace under a stream the next call
    // does not match, so the function is traced twice.
    mx::default_stream(mx::default_device());
    *out = wrap_vec(C(c).fn(arrays(in, n)));
  })
}

int ptlm_compile(ptlm_closure c, bool shapeless, ptlm_closure* out) {
  PTLM_TRY(*out = wrap_closure(mx::compile(C(c).fn, shapeless)))
}

int ptlm_checkpoint(ptlm_closure c, ptlm_closure* out) { PTLM_TRY(*out = wrap_closure(mx::checkpoint(C(c).fn))) }

int ptlm_custom_vjp(ptlm_closure fun, ptlm_vjp_fn vjp, uintptr_t payload, ptlm_payload_dtor dtor,
                   ptlm_closure* out) {
  // Once p exists it owns the payload: on any later failure its destructor
  // has released it, so the caller must not.
  PTLM_TRY({
    auto p = std::shared_ptr<VJPPayload>(new VJPPayload{vjp, payload, dtor});
    auto vjp_fn = [p](const std::vector<mx::array>& primals, const std::vector<mx::array>& cotangents,
                      const std::vector<mx::array>& outputs) {
      std::vector<ptlm_array> handles;
      handles.reserve(primals.size() + cotangents.size() + outputs.size());
      for (auto* v : {&primals, &cotangents, &outputs})
        for (auto& a : *v) handles.push_back(reinterpret_cast<ptlm_array>(const_cast<mx::array*>(&a)));
      std::vector<mx::array> outs;
      int rc = p->fn(p->payload, handles.data(), primals.size(), outputs.size(), reinterpret_cast<ptlm_vec>(&outs));
      if (rc != 0) throw std::runtime_error(last_error);
      if (outs.size() != primals.size())
        throw std::invalid_argument("custom vjp returned " + std::to_string(outs.size()) +
                                    " cotangents for " + std::to_string(primals.size()) + " inputs");
      return outs;
    };
    *out = wrap_closure(mx::custom_vjp(C(fun).fn, vjp_fn));
  })
}

int ptlm_set_compile_enabled(bool enabled) {
  PTLM_TRY(if (enabled) mx::enable_compile(); else mx::disable_compile();)
}

int ptlm_value_and_grad(ptlm_closure c, const int* argnums, size_t nargnums, ptlm_vag* out) {
  PTLM_TRY({
    auto f = mx::value_and_grad(C(c).fn, std::vector<int>(argnums, argnums + nargnums));
    *out = reinterpret_cast<ptlm_vag>(new VagFn(std::move(f)));
  })
}

int ptlm_vag_free(ptlm_vag f) { PTLM_TRY(delete reinterpret_cast<VagFn*>(f)) }

int ptlm_vag_apply(ptlm_vag f, const ptlm_array* in, size_t n, ptlm_vec* values, ptlm_vec* grads) {
  PTLM_TRY({
    if (f == nullptr) throw std::invalid_argument("nil value_and_grad handle");
    auto [v, g] = (*reinterpret_cast<VagFn*>(f))(arrays(in, n));
    *values = wrap_vec(std::move(v));
    *grads = wrap_vec(std::move(g));
  })
}

static mx::Device device_of(int type) {
  if (type == PTLM_CPU) return mx::Device(mx::Device::cpu);
  if (type == PTLM_GPU) return mx::Device(mx::Device::gpu);
  throw std::invalid_argument("unknown device type " + std::to_string(type));
}

int ptlm_device_available(int type, bool* out) { PTLM_TRY(*out = mx::is_available(device_of(type))) }
int ptlm_set_default_device(int type) { PTLM_TRY(mx::set_default_device(device_of(type))) }
int ptlm_get_default_device(int* type) {
  PTLM_TRY(*type = mx::default_device().type == mx::Device::gpu ? PTLM_GPU : PTLM_CPU)
}
int ptlm_synchronize(void) { PTLM_TRY(mx::synchronize()) }
int ptlm_device_memory(int type, size_t* out) {
  PTLM_TRY(auto& info = mx::device_info(device_of(type)); auto it = info.find("total_memory");
           if (it == info.end()) it = info.find("memory_size");
           *out = it == info.end() ? 0 : std::get<size_t>(it->second))
}

int ptlm_device_string(int type, const char* key, char** out) {
  PTLM_TRY(auto& info = mx::device_info(device_of(type)); auto it = info.find(key); std::string v;
           if (it != info.end() && std::holds_alternative<std::string>(it->second)) v = std::get<std::string>(it->second);
           *out = static_cast<char*>(std::malloc(v.size() + 1)); if (*out == nullptr) throw std::bad_alloc();
           std::memcpy(*out, v.c_str(), v.size() + 1))
}
int ptlm_mlx_version(const char** out) { PTLM_TRY(*out = mx::version()) }

int ptlm_memory_active(size_t* out) { PTLM_TRY(*out = mx::get_active_memory()) }
int ptlm_memory_peak(size_t* out) { PTLM_TRY(*out = mx::get_peak_memory()) }
int ptlm_memory_cache(size_t* out) { PTLM_TRY(*out = mx::get_cache_memory()) }
int ptlm_memory_reset_peak(void) { PTLM_TRY(mx::reset_peak_memory()) }
int ptlm_memory_set_limit(size_t limit, size_t* prev) { PTLM_TRY(*prev = mx::set_memory_limit(limit)) }
int ptlm_memory_limit(size_t* out) { PTLM_TRY(*out = mx::get_memory_limit()) }
int ptlm_memory_set_cache_limit(size_t limit, size_t* prev) { PTLM_TRY(*prev = mx::set_cache_limit(limit)) }
int ptlm_memory_clear_cache(void) { PTLM_TRY(mx::clear_cache()) }

}  // extern "C"

namespace {
struct SafeTensors {
  std::vector<std::pair<std::string, mx::array>> arrays;
  std::vector<std::pair<std::string, std::string>> meta;
};
SafeTensors& ST(ptlm_st st) {
  if (st == nullptr) throw std::invalid_argument("nil safetensors handle");
  return *reinterpret_cast<SafeTensors*>(st);
}
}  // namespace

extern "C" {

int ptlm_save_safetensors(const char* path, const char** names, const ptlm_array* arrs, size_t n,
                         const char** meta_keys, const char** meta_vals, size_t nmeta) {
  PTLM_TRY({
    std::unordered_map<std::string, mx::array> m;
    for (size_t i = 0; i < n; i++) m.insert({names[i], A(arrs[i])});
    std::unordered_map<std::string, std::string> meta;
    for (size_t i = 0; i < nmeta; i++) meta[meta_keys[i]] = meta_vals[i];
    // The Writer overload writes exactly `path`; the std::string overload
    // would append ".safetensors" to a path without that suffix.
    mx::save_safetensors(std::make_shared<mx::io::FileWriter>(std::string(path)), std::move(m), std::move(meta));
  })
}

int ptlm_load_safetensors(const char* path, ptlm_st* out) {
  PTLM_TRY({
    auto [arrs, meta] = mx::load_safetensors(std::string(path));
    auto st = std::make_unique<SafeTensors>();
    for (auto& kv : arrs) st->arrays.emplace_back(kv.first, kv.second);
    for (auto& kv : meta) st->meta.emplace_back(kv.first, kv.second);
    *out = reinterpret_cast<ptlm_st>(st.release());
  })
}

int ptlm_st_free(ptlm_st st) { PTLM_TRY(delete reinterpret_cast<SafeTensors*>(st)) }
int ptlm_st_num_arrays(ptlm_st st, size_t* out) { PTLM_TRY(*out = ST(st).arrays.size()) }
int ptlm_st_num_meta(ptlm_st st, size_t* out) { PTLM_TRY(*out = ST(st).meta.size()) }
int ptlm_st_array(ptlm_st st, size_t i, const char** name, ptlm_array* out) {
  PTLM_TRY({
    auto& e = ST(st).arrays.at(i);
    *name = e.first.c_str();
    *out = wrap(e.second);
  })
}
int ptlm_st_meta(ptlm_st st, size_t i, const char** key, const char** val) {
  PTLM_TRY({
    auto& e = ST(st).meta.at(i);
    *key = e.first.c_str();
    *val = e.second.c_str();
  })
}

}  // extern "C"
