// bridge.h declares posttrainllm's thin C bridge over MLX's C++ API, in
// mlx-c's style: opaque handles, an int status on every call (PTLM_OK,
// PTLM_FAILED or PTLM_OFF_THREAD) with a thread-local last-error string, and
// closures as (callback, payload, destructor). Every entry point catches all
// C++ exceptions, and runs only on the MLX thread (see ptlm_claim_thread).
#ifndef PTLM_MLX_BRIDGE_H
#define PTLM_MLX_BRIDGE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ptlm_array_* ptlm_array;       // owns one mlx::core::array
typedef struct ptlm_vec_* ptlm_vec;           // std::vector<mlx::core::array>
typedef struct ptlm_closure_* ptlm_closure;   // vector<array> -> vector<array>
typedef struct ptlm_vag_* ptlm_vag;           // value_and_grad function
typedef struct ptlm_st_* ptlm_st;             // loaded safetensors file
typedef struct ptlm_group_* ptlm_group;       // mlx::core::distributed::Group
typedef struct ptlm_kernel_* ptlm_kernel;     // mlx::core::fast::CustomKernelFunction

// Dtypes, numbered like mlx::core::Dtype::Val.
enum {
  PTLM_BOOL = 0, PTLM_UINT8, PTLM_UINT16, PTLM_UINT32, PTLM_UINT64, PTLM_INT8,
  PTLM_INT16, PTLM_INT32, PTLM_INT64, PTLM_FLOAT16, PTLM_FLOAT32, PTLM_FLOAT64,
  PTLM_BFLOAT16, PTLM_COMPLEX64
};
enum { PTLM_CPU = 0, PTLM_GPU = 1 };

// Statuses. PTLM_OFF_THREAD: the call came from a thread other than the MLX
// thread and did nothing; make it again on the MLX thread.
enum { PTLM_OK = 0, PTLM_FAILED = 1, PTLM_OFF_THREAD = 2 };

// Errors. The last error is per thread: read it on the thread whose call
// failed.
const char* ptlm_last_error(void);
void ptlm_set_error(const char* msg);

// The MLX thread: the one OS thread that runs every MLX call (see the Go
// package doc), because MLX keeps streams, the compile cache and the random
// key per thread. ptlm_claim_thread marks the calling thread as it, once per
// process (non-zero: another thread already is); ptlm_on_mlx_thread reports
// whether the calling thread is it. These four functions run on any thread;
// every other one returns PTLM_OFF_THREAD elsewhere.
int ptlm_claim_thread(void);
int ptlm_on_mlx_thread(void);

// Arrays.
int ptlm_array_free(ptlm_array a);
int ptlm_array_from_data(const void* data, int dtype, const int* shape, int ndim, ptlm_array* out);
int ptlm_array_from_float(double v, int dtype, ptlm_array* out);
int ptlm_array_from_int(int64_t v, int dtype, ptlm_array* out);
int ptlm_array_info(ptlm_array a, int* dtype, int* ndim, int* shape, int max_ndim);
int ptlm_array_read(ptlm_array a, void* dst, size_t nbytes);
int ptlm_array_row_contiguous(ptlm_array a, bool* out);
int ptlm_eval(const ptlm_array* arrs, size_t n);
// Counts the primitives of the unevaluated graph behind arrs, by name, as
// "name count" lines in a malloc'd string the caller frees.
int ptlm_graph_ops(const ptlm_array* arrs, size_t n, char** out);
int ptlm_async_eval(const ptlm_array* arrs, size_t n);

// Vectors of arrays.
int ptlm_vec_new(ptlm_vec* out);
int ptlm_vec_free(ptlm_vec v);
int ptlm_vec_push(ptlm_vec v, ptlm_array a);
int ptlm_vec_size(ptlm_vec v, size_t* out);
int ptlm_vec_move_all(ptlm_vec v, ptlm_array* dst);

// Closures: fn is called with borrowed input handles and pushes its outputs
// onto `outputs`; a non-zero return means failure with ptlm_set_error set.
typedef int (*ptlm_closure_fn)(uintptr_t payload, const ptlm_array* inputs, size_t n, ptlm_vec outputs);
typedef void (*ptlm_payload_dtor)(uintptr_t payload);
int ptlm_closure_new(ptlm_closure_fn fn, uintptr_t payload, ptlm_payload_dtor dtor, ptlm_closure* out);
int ptlm_closure_free(ptlm_closure c);
int ptlm_closure_apply(ptlm_closure c, const ptlm_array* in, size_t n, ptlm_vec* out);
int ptlm_compile(ptlm_closure c, bool shapeless, ptlm_closure* out);
// Custom VJPs: vjp is called with in = primals ++ cotangents ++ outputs
// (n_primals, then n_outputs twice) and pushes one cotangent per primal.
// From the call on, the result owns payload: on failure dtor has already
// released it (but not on PTLM_OFF_THREAD, which touches nothing).
typedef int (*ptlm_vjp_fn)(uintptr_t payload, const ptlm_array* in, size_t n_primals, size_t n_outputs,
                          ptlm_vec outputs);
int ptlm_custom_vjp(ptlm_closure fun, ptlm_vjp_fn vjp, uintptr_t payload, ptlm_payload_dtor dtor,
                   ptlm_closure* out);
int ptlm_set_compile_enabled(bool enabled);
int ptlm_value_and_grad(ptlm_closure c, const int* argnums, size_t nargnums, ptlm_vag* out);
int ptlm_vag_free(ptlm_vag f);
int ptlm_vag_apply(ptlm_vag f, const ptlm_array* in, size_t n, ptlm_vec* values, ptlm_vec* grads);

// Devices and memory.
int ptlm_device_available(int type, bool* out);
int ptlm_set_default_device(int type);
int ptlm_get_default_device(int* type);
int ptlm_synchronize(void);
int ptlm_device_memory(int type, size_t* out);  // total bytes; 0 if MLX does not say
// A string property of the device (device_info: "device_name", "architecture"),
// malloc'd into *out; "" if MLX does not say.
int ptlm_device_string(int type, const char* key, char** out);
int ptlm_mlx_version(const char** out);  // MLX's version string, static
int ptlm_memory_active(size_t* out);
int ptlm_memory_peak(size_t* out);
int ptlm_memory_cache(size_t* out);
int ptlm_memory_reset_peak(void);
int ptlm_memory_set_limit(size_t limit, size_t* prev);
int ptlm_memory_limit(size_t* out);
int ptlm_memory_set_cache_limit(size_t limit, size_t* prev);
int ptlm_memory_clear_cache(void);

// Safetensors.
int ptlm_save_safetensors(const char* path, const char** names, const ptlm_array* arrs, size_t n,
                         const char** meta_keys, const char** meta_vals, size_t nmeta);
int ptlm_load_safetensors(const char* path, ptlm_st* out);
int ptlm_st_free(ptlm_st st);
int ptlm_st_num_arrays(ptlm_st st, size_t* out);
int ptlm_st_num_meta(ptlm_st st, size_t* out);
int ptlm_st_array(ptlm_st st, size_t i, const char** name, ptlm_array* out);
int ptlm_st_meta(ptlm_st st, size_t i, const char** key, const char** val);

// Distributed (bridge_distributed.cpp). init returns the group of every
// process the backend ("any", "ring", "nccl", "mpi", "jaccl") finds; with
// strict false and no backend it is a size-1 group on which every
// collective is the identity. The collectives are ordinary ops: they may
// sit inside a compiled function.
int ptlm_distributed_available(const char* backend, bool* out);
int ptlm_distributed_init(bool strict, const char* backend, ptlm_group* out);
int ptlm_group_free(ptlm_group g);
int ptlm_group_rank(ptlm_group g, int* out);
int ptlm_group_size(ptlm_group g, int* out);
int ptlm_all_sum(ptlm_array a, ptlm_group g, ptlm_array* out);
int ptlm_all_max(ptlm_array a, ptlm_group g, ptlm_array* out);
int ptlm_all_gather(ptlm_array a, ptlm_group g, ptlm_array* out);

// Unary ops.
#define PTLM_UNARY_OPS(X) X(abs) X(negative) X(sign) X(sqrt) X(rsqrt) X(square) X(exp) X(log) \
  X(log1p) X(expm1) X(sin) X(cos) X(tanh) X(sigmoid) X(erf) X(floor) X(logical_not) X(isnan) X(isinf) \
  X(isfinite) X(stop_gradient) X(copy)
#define PTLM_DECL_UNARY(name) int ptlm_##name(ptlm_array a, ptlm_array* out);
PTLM_UNARY_OPS(PTLM_DECL_UNARY)

// Binary ops (numpy broadcasting).
#define PTLM_BINARY_OPS(X) X(add) X(subtract) X(multiply) X(divide) X(power) X(maximum) \
  X(minimum) X(equal) X(not_equal) X(less) X(less_equal) X(greater) X(greater_equal) \
  X(logical_and) X(logical_or) X(matmul)
#define PTLM_DECL_BINARY(name) int ptlm_##name(ptlm_array a, ptlm_array b, ptlm_array* out);
PTLM_BINARY_OPS(PTLM_DECL_BINARY)

// Reductions over axes (naxes == 0 means all axes).
#define PTLM_REDUCE_OPS(X) X(sum) X(mean) X(max) X(min) X(logsumexp) X(all) X(any)
#define PTLM_DECL_REDUCE(name) \
  int ptlm_##name(ptlm_array a, const int* axes, int naxes, bool keepdims, ptlm_array* out);
PTLM_REDUCE_OPS(PTLM_DECL_REDUCE)

int ptlm_argmax(ptlm_array a, int axis, bool keepdims, ptlm_array* out);
int ptlm_argmax_all(ptlm_array a, bool keepdims, ptlm_array* out);
int ptlm_softmax(ptlm_array a, const int* axes, int naxes, bool precise, ptlm_array* out);
int ptlm_where(ptlm_array cond, ptlm_array x, ptlm_array y, ptlm_array* out);
// beta·c + alpha·(a @ b) as one GEMM (cuBLAS adds c in its epilogue).
int ptlm_addmm(ptlm_array c, ptlm_array a, ptlm_array b, float alpha, float beta, ptlm_array* out);
int ptlm_astype(ptlm_array a, int dtype, ptlm_array* out);
int ptlm_reshape(ptlm_array a, const int* shape, int ndim, ptlm_array* out);
int ptlm_transpose(ptlm_array a, const int* axes, int naxes, ptlm_array* out);
int ptlm_swapaxes(ptlm_array a, int axis1, int axis2, ptlm_array* out);
int ptlm_broadcast_to(ptlm_array a, const int* shape, int ndim, ptlm_array* out);
int ptlm_expand_dims(ptlm_array a, int axis, ptlm_array* out);
int ptlm_squeeze(ptlm_array a, int axis, ptlm_array* out);
int ptlm_flatten(ptlm_array a, int start_axis, int end_axis, ptlm_array* out);
int ptlm_concatenate(const ptlm_array* arrs, size_t n, int axis, ptlm_array* out);
int ptlm_stack(const ptlm_array* arrs, size_t n, int axis, ptlm_array* out);
// inputs, each made to wait for every one of deps (no data flows from them).
int ptlm_depends(const ptlm_array* in, size_t n, const ptlm_array* deps, size_t ndeps, ptlm_vec* out);
int ptlm_split_sections(ptlm_array a, int num, int axis, ptlm_vec* out);
int ptlm_split_indices(ptlm_array a, const int* indices, int n, int axis, ptlm_vec* out);
int ptlm_slice(ptlm_array a, const int* start, const int* stop, const int* strides, int ndim, ptlm_array* out);
int ptlm_slice_update(ptlm_array src, ptlm_array upd, const int* start, const int* stop,
                     const int* strides, int ndim, ptlm_array* out);
int ptlm_take(ptlm_array a, ptlm_array indices, int axis, ptlm_array* out);
int ptlm_take_along_axis(ptlm_array a, ptlm_array indices, int axis, ptlm_array* out);
int ptlm_put_along_axis(ptlm_array a, ptlm_array indices, ptlm_array values, int axis, ptlm_array* out);
int ptlm_topk(ptlm_array a, int k, int axis, ptlm_array* out);
int ptlm_sort(ptlm_array a, int axis, ptlm_array* out);
int ptlm_cumsum(ptlm_array a, int axis, bool reverse, bool inclusive, ptlm_array* out);
int ptlm_arange(double start, double stop, double step, int dtype, ptlm_array* out);
int ptlm_zeros(const int* shape, int ndim, int dtype, ptlm_array* out);
int ptlm_ones(const int* shape, int ndim, int dtype, ptlm_array* out);
int ptlm_full(const int* shape, int ndim, ptlm_array val, int dtype, ptlm_array* out);
int ptlm_tril(ptlm_array a, int k, ptlm_array* out);
int ptlm_triu(ptlm_array a, int k, ptlm_array* out);

// Fast kernels. weight/bias may be NULL.
int ptlm_fast_rms_norm(ptlm_array x, ptlm_array weight, float eps, ptlm_array* out);
int ptlm_fast_layer_norm(ptlm_array x, ptlm_array weight, ptlm_array bias, float eps, ptlm_array* out);
int ptlm_fast_rope(ptlm_array x, int dims, bool traditional, float base, float scale, int offset, ptlm_array* out);
// rope with the period of each rotated pair given (freqs, [dims/2]) instead of a base.
int ptlm_fast_rope_freqs(ptlm_array x, int dims, bool traditional, float scale, int offset, ptlm_array freqs,
                        ptlm_array* out);
// rope with one start position per row of x ([B, ...] with offsets [B], int32); freqs may be NULL (then base).
int ptlm_fast_rope_offsets(ptlm_array x, int dims, bool traditional, float base, float scale, ptlm_array offsets,
                          ptlm_array freqs, ptlm_array* out);
int ptlm_fast_sdpa(ptlm_array q, ptlm_array k, ptlm_array v, float scale, const char* mask_mode,
                  ptlm_array mask, ptlm_array* out);
int ptlm_fast_cross_entropy(ptlm_array logits, ptlm_array targets, ptlm_array* out);

// Custom kernels: CUDA C++ source that MLX compiles at run time (NVRTC)
// and launches as one graph operation. cuda_available reports whether this
// libmlx has the CUDA backend; a kernel can only run there.
int ptlm_cuda_available(bool* out);
int ptlm_cuda_kernel_new(const char* name, const char** inputs, size_t n_in, const char** outputs, size_t n_out,
                         const char* source, const char* header, ptlm_kernel* out);
int ptlm_kernel_free(ptlm_kernel k);
// shapes holds the outputs' shapes one after another, ndims their ranks;
// grid and group are 3 ints each, in threads; template arguments are ints.
int ptlm_kernel_apply(ptlm_kernel k, const ptlm_array* in, size_t n_in, const int* shapes, const int* ndims,
                      const int* dtypes, size_t n_out, const int* grid, const int* group, const char** tnames,
                      const int* tvalues, size_t n_t, ptlm_vec* out);

// Random numbers with explicit keys.
int ptlm_random_key(uint64_t seed, ptlm_array* out);
int ptlm_random_split(ptlm_array key, int num, ptlm_array* out);
int ptlm_random_normal(const int* shape, int ndim, int dtype, float loc, float scale, ptlm_array key, ptlm_array* out);
int ptlm_random_uniform(const int* shape, int ndim, int dtype, float low, float high, ptlm_array key, ptlm_array* out);
int ptlm_random_categorical(ptlm_array logits, int axis, ptlm_array key, ptlm_array* out);

#ifdef __cplusplus
}
#endif
#endif
