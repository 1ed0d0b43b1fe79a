// bridge.h declares posttrainllm's thin C bridge over MLX's C++ API, in
// mlx-c's style: opaque handles, an int status on every call (0 = ok) with a
// thread-local last-error string, and closures as (callback, payload,
// destructor). Every entry point catches all C++ exceptions.
#ifndef PTLM_MLX_BRIDGE_H
#define PTLM_MLX_BRIDGE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mlx_array_* mlx_array;       // owns one mlx::core::array
typedef struct mlx_vec_* mlx_vec;           // std::vector<mlx::core::array>
typedef struct mlx_closure_* mlx_closure;   // vector<array> -> vector<array>
typedef struct mlx_vag_* mlx_vag;           // value_and_grad function
typedef struct mlx_st_* mlx_st;             // loaded safetensors file

// Dtypes, numbered like mlx::core::Dtype::Val.
enum {
  MLX_BOOL = 0, MLX_UINT8, MLX_UINT16, MLX_UINT32, MLX_UINT64, MLX_INT8,
  MLX_INT16, MLX_INT32, MLX_INT64, MLX_FLOAT16, MLX_FLOAT32, MLX_FLOAT64,
  MLX_BFLOAT16, MLX_COMPLEX64
};
enum { MLX_CPU = 0, MLX_GPU = 1 };

// Errors.
const char* mlx_last_error(void);
void mlx_set_error(const char* msg);

// Arrays.
int mlx_array_free(mlx_array a);
int mlx_array_from_data(const void* data, int dtype, const int* shape, int ndim, mlx_array* out);
int mlx_array_from_float(double v, int dtype, mlx_array* out);
int mlx_array_from_int(int64_t v, int dtype, mlx_array* out);
int mlx_array_info(mlx_array a, int* dtype, int* ndim, int* shape, int max_ndim);
int mlx_array_read(mlx_array a, void* dst, size_t nbytes);
int mlx_eval(const mlx_array* arrs, size_t n);
// Counts the primitives of the unevaluated graph behind arrs, by name, as
// "name count" lines in a malloc'd string the caller frees.
int mlx_graph_ops(const mlx_array* arrs, size_t n, char** out);
int mlx_async_eval(const mlx_array* arrs, size_t n);

// Vectors of arrays.
int mlx_vec_new(mlx_vec* out);
int mlx_vec_free(mlx_vec v);
int mlx_vec_push(mlx_vec v, mlx_array a);
size_t mlx_vec_size(mlx_vec v);
int mlx_vec_move_all(mlx_vec v, mlx_array* dst);

// Closures: fn is called with borrowed input handles and pushes its outputs
// onto `outputs`; a non-zero return means failure with mlx_set_error set.
typedef int (*mlx_closure_fn)(uintptr_t payload, const mlx_array* inputs, size_t n, mlx_vec outputs);
typedef void (*mlx_payload_dtor)(uintptr_t payload);
int mlx_closure_new(mlx_closure_fn fn, uintptr_t payload, mlx_payload_dtor dtor, mlx_closure* out);
int mlx_closure_free(mlx_closure c);
int mlx_closure_apply(mlx_closure c, const mlx_array* in, size_t n, mlx_vec* out);
int mlx_compile(mlx_closure c, bool shapeless, mlx_closure* out);
// Custom VJPs: vjp is called with in = primals ++ cotangents ++ outputs
// (n_primals, then n_outputs twice) and pushes one cotangent per primal.
// From the call on, the result owns payload: on failure dtor has already
// released it.
typedef int (*mlx_vjp_fn)(uintptr_t payload, const mlx_array* in, size_t n_primals, size_t n_outputs,
                          mlx_vec outputs);
int mlx_custom_vjp(mlx_closure fun, mlx_vjp_fn vjp, uintptr_t payload, mlx_payload_dtor dtor,
                   mlx_closure* out);
int mlx_set_compile_enabled(bool enabled);
int mlx_value_and_grad(mlx_closure c, const int* argnums, size_t nargnums, mlx_vag* out);
int mlx_vag_free(mlx_vag f);
int mlx_vag_apply(mlx_vag f, const mlx_array* in, size_t n, mlx_vec* values, mlx_vec* grads);

// Devices and memory.
int mlx_device_available(int type, bool* out);
int mlx_set_default_device(int type);
int mlx_get_default_device(int* type);
int mlx_synchronize(void);
int mlx_memory_active(size_t* out);
int mlx_memory_peak(size_t* out);
int mlx_memory_cache(size_t* out);
int mlx_memory_reset_peak(void);
int mlx_memory_set_limit(size_t limit, size_t* prev);
int mlx_memory_set_cache_limit(size_t limit, size_t* prev);
int mlx_memory_clear_cache(void);

// Safetensors.
int mlx_save_safetensors(const char* path, const char** names, const mlx_array* arrs, size_t n,
                         const char** meta_keys, const char** meta_vals, size_t nmeta);
int mlx_load_safetensors(const char* path, mlx_st* out);
int mlx_st_free(mlx_st st);
size_t mlx_st_num_arrays(mlx_st st);
size_t mlx_st_num_meta(mlx_st st);
int mlx_st_array(mlx_st st, size_t i, const char** name, mlx_array* out);
int mlx_st_meta(mlx_st st, size_t i, const char** key, const char** val);

// Unary ops.
#define PTLM_UNARY_OPS(X) X(abs) X(negative) X(sign) X(sqrt) X(rsqrt) X(square) X(exp) X(log) \
  X(log1p) X(sin) X(cos) X(tanh) X(sigmoid) X(erf) X(floor) X(logical_not) X(isnan) X(isinf) \
  X(isfinite) X(stop_gradient) X(copy)
#define PTLM_DECL_UNARY(name) int mlx_##name(mlx_array a, mlx_array* out);
PTLM_UNARY_OPS(PTLM_DECL_UNARY)

// Binary ops (numpy broadcasting).
#define PTLM_BINARY_OPS(X) X(add) X(subtract) X(multiply) X(divide) X(power) X(maximum) \
  X(minimum) X(equal) X(not_equal) X(less) X(less_equal) X(greater) X(greater_equal) \
  X(logical_and) X(logical_or) X(matmul)
#define PTLM_DECL_BINARY(name) int mlx_##name(mlx_array a, mlx_array b, mlx_array* out);
PTLM_BINARY_OPS(PTLM_DECL_BINARY)

// Reductions over axes (naxes == 0 means all axes).
#define PTLM_REDUCE_OPS(X) X(sum) X(mean) X(max) X(min) X(logsumexp) X(all) X(any)
#define PTLM_DECL_REDUCE(name) \
  int mlx_##name(mlx_array a, const int* axes, int naxes, bool keepdims, mlx_array* out);
PTLM_REDUCE_OPS(PTLM_DECL_REDUCE)

int mlx_argmax(mlx_array a, int axis, bool keepdims, mlx_array* out);
int mlx_argmax_all(mlx_array a, bool keepdims, mlx_array* out);
int mlx_softmax(mlx_array a, const int* axes, int naxes, bool precise, mlx_array* out);
int mlx_where(mlx_array cond, mlx_array x, mlx_array y, mlx_array* out);
// beta·c + alpha·(a @ b) as one GEMM (cuBLAS adds c in its epilogue).
int mlx_addmm(mlx_array c, mlx_array a, mlx_array b, float alpha, float beta, mlx_array* out);
int mlx_astype(mlx_array a, int dtype, mlx_array* out);
int mlx_reshape(mlx_array a, const int* shape, int ndim, mlx_array* out);
int mlx_transpose(mlx_array a, const int* axes, int naxes, mlx_array* out);
int mlx_swapaxes(mlx_array a, int axis1, int axis2, mlx_array* out);
int mlx_broadcast_to(mlx_array a, const int* shape, int ndim, mlx_array* out);
int mlx_expand_dims(mlx_array a, int axis, mlx_array* out);
int mlx_squeeze(mlx_array a, int axis, mlx_array* out);
int mlx_flatten(mlx_array a, int start_axis, int end_axis, mlx_array* out);
int mlx_concatenate(const mlx_array* arrs, size_t n, int axis, mlx_array* out);
int mlx_stack(const mlx_array* arrs, size_t n, int axis, mlx_array* out);
int mlx_split_sections(mlx_array a, int num, int axis, mlx_vec* out);
int mlx_split_indices(mlx_array a, const int* indices, int n, int axis, mlx_vec* out);
int mlx_slice(mlx_array a, const int* start, const int* stop, const int* strides, int ndim, mlx_array* out);
int mlx_slice_update(mlx_array src, mlx_array upd, const int* start, const int* stop,
                     const int* strides, int ndim, mlx_array* out);
int mlx_take(mlx_array a, mlx_array indices, int axis, mlx_array* out);
int mlx_take_along_axis(mlx_array a, mlx_array indices, int axis, mlx_array* out);
int mlx_put_along_axis(mlx_array a, mlx_array indices, mlx_array values, int axis, mlx_array* out);
int mlx_topk(mlx_array a, int k, int axis, mlx_array* out);
int mlx_arange(double start, double stop, double step, int dtype, mlx_array* out);
int mlx_zeros(const int* shape, int ndim, int dtype, mlx_array* out);
int mlx_ones(const int* shape, int ndim, int dtype, mlx_array* out);
int mlx_full(const int* shape, int ndim, mlx_array val, int dtype, mlx_array* out);
int mlx_tril(mlx_array a, int k, mlx_array* out);
int mlx_triu(mlx_array a, int k, mlx_array* out);

// Fast kernels. weight/bias may be NULL.
int mlx_fast_rms_norm(mlx_array x, mlx_array weight, float eps, mlx_array* out);
int mlx_fast_layer_norm(mlx_array x, mlx_array weight, mlx_array bias, float eps, mlx_array* out);
int mlx_fast_rope(mlx_array x, int dims, bool traditional, float base, float scale, int offset, mlx_array* out);
int mlx_fast_sdpa(mlx_array q, mlx_array k, mlx_array v, float scale, const char* mask_mode,
                  mlx_array mask, mlx_array* out);
int mlx_fast_cross_entropy(mlx_array logits, mlx_array targets, mlx_array* out);

// Random numbers with explicit keys.
int mlx_random_key(uint64_t seed, mlx_array* out);
int mlx_random_split(mlx_array key, int num, mlx_array* out);
int mlx_random_normal(const int* shape, int ndim, int dtype, float loc, float scale, mlx_array key, mlx_array* out);
int mlx_random_uniform(const int* shape, int ndim, int dtype, float low, float high, mlx_array key, mlx_array* out);
int mlx_random_categorical(mlx_array logits, int axis, mlx_array key, mlx_array* out);

#ifdef __cplusplus
}
#endif
#endif
