// bridge_ops.cpp: one short C function per MLX op, fast kernel and random
// generator. Every function catches all C++ exceptions (PTLM_TRY).
#include "bridge_internal.h"

using namespace ptlm;

extern "C" {

#define PTLM_DEF_UNARY(name) \
  int mlx_##name(mlx_array a, mlx_array* out) { PTLM_TRY(*out = wrap(mx::name(A(a)))) }
PTLM_UNARY_OPS(PTLM_DEF_UNARY)

#define PTLM_DEF_BINARY(name) \
  int mlx_##name(mlx_array a, mlx_array b, mlx_array* out) { PTLM_TRY(*out = wrap(mx::name(A(a), A(b)))) }
PTLM_BINARY_OPS(PTLM_DEF_BINARY)

#define PTLM_DEF_REDUCE(name)                                                                   \
  int mlx_##name(mlx_array a, const int* axes, int naxes, bool keepdims, mlx_array* out) {      \
    PTLM_TRY(*out = wrap(naxes == 0 ? mx::name(A(a), keepdims)                                  \
                                    : mx::name(A(a), ints(axes, naxes), keepdims)))             \
  }
PTLM_REDUCE_OPS(PTLM_DEF_REDUCE)

int mlx_argmax(mlx_array a, int axis, bool keepdims, mlx_array* out) {
  PTLM_TRY(*out = wrap(mx::argmax(A(a), axis, keepdims)))
}
int mlx_argmax_all(mlx_array a, bool keepdims, mlx_array* out) {
  PTLM_TRY(*out = wrap(mx::argmax(A(a), keepdims)))
}
int mlx_softmax(mlx_array a, const int* axes, int naxes, bool precise, mlx_array* out) {
  PTLM_TRY(*out = wrap(naxes == 0 ? mx::softmax(A(a), precise) : mx::softmax(A(a), ints(axes, naxes), precise)))
}
int mlx_where(mlx_array cond, mlx_array x, mlx_array y, mlx_array* out) {
  PTLM_TRY(*out = wrap(mx::where(A(cond), A(x), A(y))))
}
int mlx_addmm(mlx_array c, mlx_array a, mlx_array b, float alpha, float beta, mlx_array* out) {
  PTLM_TRY(*out = wrap(mx::addmm(A(c), A(a), A(b), alpha, beta)))
}
int mlx_astype(mlx_array a, int dtype, mlx_array* out) { PTLM_TRY(*out = wrap(mx::astype(A(a), dtype_of(dtype)))) }
int mlx_reshape(mlx_array a, const int* shape, int ndim, mlx_array* out) {
  PTLM_TRY(*out = wrap(mx::reshape(A(a), shape_of(shape, ndim))))
}
int mlx_transpose(mlx_array a, const int* axes, int naxes, mlx_array* out) {
  PTLM_TRY(*out = wrap(naxes == 0 ? mx::transpose(A(a)) : mx::transpose(A(a), ints(axes, naxes))))
}
int mlx_swapaxes(mlx_array a, int axis1, int axis2, mlx_array* out) {
  PTLM_TRY(*out = wrap(mx::swapaxes(A(a), axis1, axis2)))
}
int mlx_broadcast_to(mlx_array a, const int* shape, int ndim, mlx_array* out) {
  PTLM_TRY(*out = wrap(mx::broadcast_to(A(a), shape_of(shape, ndim))))
}
int mlx_expand_dims(mlx_array a, int axis, mlx_array* out) { PTLM_TRY(*out = wrap(mx::expand_dims(A(a), axis))) }
int mlx_squeeze(mlx_array a, int axis, mlx_array* out) { PTLM_TRY(*out = wrap(mx::squeeze(A(a), axis))) }
int mlx_flatten(mlx_array a, int start_axis, int end_axis, mlx_array* out) {
  PTLM_TRY(*out = wrap(mx::flatten(A(a), start_axis, end_axis)))
}
int mlx_concatenate(const mlx_array* arrs, size_t n, int axis, mlx_array* out) {
  PTLM_TRY(*out = wrap(mx::concatenate(arrays(arrs, n), axis)))
}
int mlx_stack(const mlx_array* arrs, size_t n, int axis, mlx_array* out) {
  PTLM_TRY(*out = wrap(mx::stack(arrays(arrs, n), axis)))
}
int mlx_split_sections(mlx_array a, int num, int axis, mlx_vec* out) {
  PTLM_TRY(*out = wrap_vec(mx::split(A(a), num, axis)))
}
int mlx_split_indices(mlx_array a, const int* indices, int n, int axis, mlx_vec* out) {
  PTLM_TRY(*out = wrap_vec(mx::split(A(a), shape_of(indices, n), axis)))
}
int mlx_slice(mlx_array a, const int* start, const int* stop, const int* strides, int ndim, mlx_array* out) {
  PTLM_TRY(*out = wrap(mx::slice(A(a), shape_of(start, ndim), shape_of(stop, ndim), shape_of(strides, ndim))))
}
int mlx_slice_update(mlx_array src, mlx_array upd, const int* start, const int* stop, const int* strides,
                     int ndim, mlx_array* out) {
  PTLM_TRY(*out = wrap(mx::slice_update(A(src), A(upd), shape_of(start, ndim), shape_of(stop, ndim),
                                        shape_of(strides, ndim))))
}
int mlx_take(mlx_array a, mlx_array indices, int axis, mlx_array* out) {
  PTLM_TRY(*out = wrap(mx::take(A(a), A(indices), axis)))
}
int mlx_take_along_axis(mlx_array a, mlx_array indices, int axis, mlx_array* out) {
  PTLM_TRY(*out = wrap(mx::take_along_axis(A(a), A(indices), axis)))
}
int mlx_put_along_axis(mlx_array a, mlx_array indices, mlx_array values, int axis, mlx_array* out) {
  PTLM_TRY(*out = wrap(mx::put_along_axis(A(a), A(indices), A(values), axis)))
}
int mlx_topk(mlx_array a, int k, int axis, mlx_array* out) { PTLM_TRY(*out = wrap(mx::topk(A(a), k, axis))) }
int mlx_arange(double start, double stop, double step, int dtype, mlx_array* out) {
  PTLM_TRY(*out = wrap(mx::arange(start, stop, step, dtype_of(dtype))))
}
int mlx_zeros(const int* shape, int ndim, int dtype, mlx_array* out) {
  PTLM_TRY(*out = wrap(mx::zeros(shape_of(shape, ndim), dtype_of(dtype))))
}
int mlx_ones(const int* shape, int ndim, int dtype, mlx_array* out) {
  PTLM_TRY(*out = wrap(mx::ones(shape_of(shape, ndim), dtype_of(dtype))))
}
int mlx_full(const int* shape, int ndim, mlx_array val, int dtype, mlx_array* out) {
  PTLM_TRY(*out = wrap(mx::full(shape_of(shape, ndim), A(val), dtype_of(dtype))))
}
int mlx_tril(mlx_array a, int k, mlx_array* out) { PTLM_TRY(*out = wrap(mx::tril(A(a), k))) }
int mlx_triu(mlx_array a, int k, mlx_array* out) { PTLM_TRY(*out = wrap(mx::triu(A(a), k))) }

int mlx_fast_rms_norm(mlx_array x, mlx_array weight, float eps, mlx_array* out) {
  PTLM_TRY(*out = wrap(mx::fast::rms_norm(A(x), opt(weight), eps)))
}
int mlx_fast_layer_norm(mlx_array x, mlx_array weight, mlx_array bias, float eps, mlx_array* out) {
  PTLM_TRY(*out = wrap(mx::fast::layer_norm(A(x), opt(weight), opt(bias), eps)))
}
int mlx_fast_rope(mlx_array x, int dims, bool traditional, float base, float scale, int offset, mlx_array* out) {
  PTLM_TRY(*out = wrap(mx::fast::rope(A(x), dims, traditional, base, scale, offset)))
}
int mlx_fast_sdpa(mlx_array q, mlx_array k, mlx_array v, float scale, const char* mask_mode, mlx_array mask,
                  mlx_array* out) {
  PTLM_TRY(*out = wrap(mx::fast::scaled_dot_product_attention(A(q), A(k), A(v), scale,
                                                              mask_mode ? mask_mode : "", opt(mask))))
}
int mlx_fast_cross_entropy(mlx_array logits, mlx_array targets, mlx_array* out) {
  PTLM_TRY(*out = wrap(mx::fast::cross_entropy(A(logits), A(targets))))
}

int mlx_random_key(uint64_t seed, mlx_array* out) { PTLM_TRY(*out = wrap(mx::random::key(seed))) }
int mlx_random_split(mlx_array key, int num, mlx_array* out) {
  PTLM_TRY(*out = wrap(mx::random::split(A(key), num)))
}
int mlx_random_normal(const int* shape, int ndim, int dtype, float loc, float scale, mlx_array key,
                      mlx_array* out) {
  PTLM_TRY(*out = wrap(mx::random::normal(shape_of(shape, ndim), dtype_of(dtype), loc, scale, opt(key))))
}
int mlx_random_uniform(const int* shape, int ndim, int dtype, float low, float high, mlx_array key,
                       mlx_array* out) {
  PTLM_TRY(*out = wrap(mx::random::uniform(mx::array(low), mx::array(high), shape_of(shape, ndim),
                                           dtype_of(dtype), opt(key))))
}
int mlx_random_categorical(mlx_array logits, int axis, mlx_array key, mlx_array* out) {
  PTLM_TRY(*out = wrap(mx::random::categorical(A(logits), axis, opt(key))))
}

}  // extern "C"
