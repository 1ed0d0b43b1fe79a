// bridge_ops.cpp: one short C function per MLX op, fast kernel and random
// generator. Every function catches all C++ exceptions (PTLM_TRY).
#include "bridge_internal.h"

using namespace ptlm;

extern "C" {

#define PTLM_DEF_UNARY(name) \
  int ptlm_##name(ptlm_array a, ptlm_array* out) { PTLM_TRY(*out = wrap(mx::name(A(a)))) }
PTLM_UNARY_OPS(PTLM_DEF_UNARY)

#define PTLM_DEF_BINARY(name) \
  int ptlm_##name(ptlm_array a, ptlm_array b, ptlm_array* out) { PTLM_TRY(*out = wrap(mx::name(A(a), A(b)))) }
PTLM_BINARY_OPS(PTLM_DEF_BINARY)

#define PTLM_DEF_REDUCE(name)                                                                   \
  int ptlm_##name(ptlm_array a, const int* axes, int naxes, bool keepdims, ptlm_array* out) {      \
    PTLM_TRY(*out = wrap(naxes == 0 ? mx::name(A(a), keepdims)                                  \
                                    : mx::name(A(a), ints(axes, naxes), keepdims)))             \
  }
PTLM_REDUCE_OPS(PTLM_DEF_REDUCE)

int ptlm_argmax(ptlm_array a, int axis, bool keepdims, ptlm_array* out) {
  PTLM_TRY(*out = wrap(mx::argmax(A(a), axis, keepdims)))
}
int ptlm_argmax_all(ptlm_array a, bool keepdims, ptlm_array* out) {
  PTLM_TRY(*out = wrap(mx::argmax(A(a), keepdims)))
}
int ptlm_softmax(ptlm_array a, const int* axes, int naxes, bool precise, ptlm_array* out) {
  PTLM_TRY(*out = wrap(naxes == 0 ? mx::softmax(A(a), precise) : mx::softmax(A(a), ints(axes, naxes), precise)))
}
int ptlm_where(ptlm_array cond, ptlm_array x, ptlm_array y, ptlm_array* out) {
  PTLM_TRY(*out = wrap(mx::where(A(cond), A(x), A(y))))
}
int ptlm_addmm(ptlm_array c, ptlm_array a, ptlm_array b, float alpha, float beta, ptlm_array* out) {
  PTLM_TRY(*out = wrap(mx::addmm(A(c), A(a), A(b), alpha, beta)))
}
int ptlm_astype(ptlm_array a, int dtype, ptlm_array* out) { PTLM_TRY(*out = wrap(mx::astype(A(a), dtype_of(dtype)))) }
int ptlm_reshape(ptlm_array a, const int* shape, int ndim, ptlm_array* out) {
  PTLM_TRY(*out = wrap(mx::reshape(A(a), shape_of(shape, ndim))))
}
int ptlm_transpose(ptlm_array a, const int* axes, int naxes, ptlm_array* out) {
  PTLM_TRY(*out = wrap(naxes == 0 ? mx::transpose(A(a)) : mx::transpose(A(a), ints(axes, naxes))))
}
int ptlm_swapaxes(ptlm_array a, int axis1, int axis2, ptlm_array* out) {
  PTLM_TRY(*out = wrap(mx::swapaxes(A(a), axis1, axis2)))
}
int ptlm_broadcast_to(ptlm_array a, const int* shape, int ndim, ptlm_array* out) {
  PTLM_TRY(*out = wrap(mx::broadcast_to(A(a), shape_of(shape, ndim))))
}
int ptlm_expand_dims(ptlm_array a, int axis, ptlm_array* out) { PTLM_TRY(*out = wrap(mx::expand_dims(A(a), axis))) }
int ptlm_squeeze(ptlm_array a, int axis, ptlm_array* out) { PTLM_TRY(*out = wrap(mx::squeeze(A(a), axis))) }
int ptlm_flatten(ptlm_array a, int start_axis, int end_axis, ptlm_array* out) {
  PTLM_TRY(*out = wrap(mx::flatten(A(a), start_axis, end_axis)))
}
int ptlm_concatenate(const ptlm_array* arrs, size_t n, int axis, ptlm_array* out) {
  PTLM_TRY(*out = wrap(mx::concatenate(arrays(arrs, n), axis)))
}
int ptlm_stack(const ptlm_array* arrs, size_t n, int axis, ptlm_array* out) {
  PTLM_TRY(*out = wrap(mx::stack(arrays(arrs, n), axis)))
}
int ptlm_depends(const ptlm_array* in, size_t n, const ptlm_array* deps, size_t ndeps, ptlm_vec* out) {
  PTLM_TRY(*out = wrap_vec(mx::depends(arrays(in, n), arrays(deps, ndeps))))
}
int ptlm_split_sections(ptlm_array a, int num, int axis, ptlm_vec* out) {
  PTLM_TRY(*out = wrap_vec(mx::split(A(a), num, axis)))
}
int ptlm_split_indices(ptlm_array a, const int* indices, int n, int axis, ptlm_vec* out) {
  PTLM_TRY(*out = wrap_vec(mx::split(A(a), shape_of(indices, n), axis)))
}
int ptlm_slice(ptlm_array a, const int* start, const int* stop, const int* strides, int ndim, ptlm_array* out) {
  PTLM_TRY(*out = wrap(mx::slice(A(a), shape_of(start, ndim), shape_of(stop, ndim), shape_of(strides, ndim))))
}
int ptlm_slice_update(ptlm_array src, ptlm_array upd, const int* start, const int* stop, const int* strides,
                     int ndim, ptlm_array* out) {
  PTLM_TRY(*out = wrap(mx::slice_update(A(src), A(upd), shape_of(start, ndim), shape_of(stop, ndim),
                                        shape_of(strides, ndim))))
}
int ptlm_take(ptlm_array a, ptlm_array indices, int axis, ptlm_array* out) {
  PTLM_TRY(*out = wrap(mx::take(A(a), A(indices), axis)))
}
int ptlm_take_along_axis(ptlm_array a, ptlm_array indices, int axis, ptlm_array* out) {
  PTLM_TRY(*out = wrap(mx::take_along_axis(A(a), A(indices), axis)))
}
int ptlm_put_along_axis(ptlm_array a, ptlm_array indices, ptlm_array values, int axis, ptlm_array* out) {
  PTLM_TRY(*out = wrap(mx::put_along_axis(A(a), A(indices), A(values), axis)))
}
int ptlm_topk(ptlm_array a, int k, int axis, ptlm_array* out) { PTLM_TRY(*out = wrap(mx::topk(A(a), k, axis))) }
int ptlm_sort(ptlm_array a, int axis, ptlm_array* out) { PTLM_TRY(*out = wrap(mx::sort(A(a), axis))) }
int ptlm_cumsum(ptlm_array a, int axis, bool reverse, bool inclusive, ptlm_array* out) {
  PTLM_TRY(*out = wrap(mx::cumsum(A(a), axis, reverse, inclusive)))
}
int ptlm_arange(double start, double stop, double step, int dtype, ptlm_array* out) {
  PTLM_TRY(*out = wrap(mx::arange(start, stop, step, dtype_of(dtype))))
}
int ptlm_zeros(const int* shape, int ndim, int dtype, ptlm_array* out) {
  PTLM_TRY(*out = wrap(mx::zeros(shape_of(shape, ndim), dtype_of(dtype))))
}
int ptlm_ones(const int* shape, int ndim, int dtype, ptlm_array* out) {
  PTLM_TRY(*out = wrap(mx::ones(shape_of(shape, ndim), dtype_of(dtype))))
}
int ptlm_full(const int* shape, int ndim, ptlm_array val, int dtype, ptlm_array* out) {
  PTLM_TRY(*out = wrap(mx::full(shape_of(shape, ndim), A(val), dtype_of(dtype))))
}
int ptlm_tril(ptlm_array a, int k, ptlm_array* out) { PTLM_TRY(*out = wrap(mx::tril(A(a), k))) }
int ptlm_triu(ptlm_array a, int k, ptlm_array* out) { PTLM_TRY(*out = wrap(mx::triu(A(a), k))) }

int ptlm_fast_rms_norm(ptlm_array x, ptlm_array weight, float eps, ptlm_array* out) {
  PTLM_TRY(*out = wrap(mx::fast::rms_norm(A(x), opt(weight), eps)))
}
int ptlm_fast_layer_norm(ptlm_array x, ptlm_array weight, ptlm_array bias, float eps, ptlm_array* out) {
  PTLM_TRY(*out = wrap(mx::fast::layer_norm(A(x), opt(weight), opt(bias), eps)))
}
int ptlm_fast_rope(ptlm_array x, int dims, bool traditional, float base, float scale, int offset, ptlm_array* out) {
  PTLM_TRY(*out = wrap(mx::fast::rope(A(x), dims, traditional, base, scale, offset)))
}
int ptlm_fast_rope_freqs(ptlm_array x, int dims, bool traditional, float scale, int offset, ptlm_array freqs,
                        ptlm_array* out) {
  PTLM_TRY(*out = wrap(mx::fast::rope(A(x), dims, traditional, std::nullopt, scale, offset, A(freqs))))
}
int ptlm_fast_rope_offsets(ptlm_array x, int dims, bool traditional, float base, float scale, ptlm_array offsets,
                          ptlm_array freqs, ptlm_array* out) {
  std::optional<float> b = base;
  if (freqs) b = std::nullopt;
  PTLM_TRY(*out = wrap(mx::fast::rope(A(x), dims, traditional, b, scale, A(offsets), opt(freqs))))
}
int ptlm_fast_sdpa(ptlm_array q, ptlm_array k, ptlm_array v, float scale, const char* mask_mode, ptlm_array mask,
                  ptlm_array* out) {
  PTLM_TRY(*out = wrap(mx::fast::scaled_dot_product_attention(A(q), A(k), A(v), scale,
                                                              mask_mode ? mask_mode : "", opt(mask))))
}
int ptlm_fast_cross_entropy(ptlm_array logits, ptlm_array targets, ptlm_array* out) {
  PTLM_TRY(*out = wrap(mx::fast::cross_entropy(A(logits), A(targets))))
}

int ptlm_random_key(uint64_t seed, ptlm_array* out) { PTLM_TRY(*out = wrap(mx::random::key(seed))) }
int ptlm_random_split(ptlm_array key, int num, ptlm_array* out) {
  PTLM_TRY(*out = wrap(mx::random::split(A(key), num)))
}
int ptlm_random_normal(const int* shape, int ndim, int dtype, float loc, float scale, ptlm_array key,
                      ptlm_array* out) {
  PTLM_TRY(*out = wrap(mx::random::normal(shape_of(shape, ndim), dtype_of(dtype), loc, scale, opt(key))))
}
int ptlm_random_uniform(const int* shape, int ndim, int dtype, float low, float high, ptlm_array key,
                       ptlm_array* out) {
  PTLM_TRY(*out = wrap(mx::random::uniform(mx::array(low), mx::array(high), shape_of(shape, ndim),
                                           dtype_of(dtype), opt(key))))
}
int ptlm_random_categorical(ptlm_array logits, int axis, ptlm_array key, ptlm_array* out) {
  PTLM_TRY(*out = wrap(mx::random::categorical(A(logits), axis, opt(key))))
}

}  // extern "C"
