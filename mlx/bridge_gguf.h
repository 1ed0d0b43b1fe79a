// bridge_gguf.h: MLX's GGUF loader (mlx::core::load_gguf) behind the
// bridge's conventions: an opaque handle, an int status and the
// thread-local last error, every C++ exception caught.
#ifndef PTLM_BRIDGE_GGUF_H
#define PTLM_BRIDGE_GGUF_H

#include "bridge.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ptlm_gguf_* ptlm_gguf;  // a loaded GGUF file: arrays and metadata

// Kinds of a metadata value, the alternatives of mlx::core::GGUFMetaData.
enum { PTLM_GGUF_NONE = 0, PTLM_GGUF_ARRAY = 1, PTLM_GGUF_STRING = 2, PTLM_GGUF_STRINGS = 3 };

// ptlm_load_gguf loads every tensor and metadata value of the GGUF file
// path. MLX trusts the file's structure: validate it first (the Go side
// does). Names, keys and strings stay valid until ptlm_gguf_free.
int ptlm_load_gguf(const char* path, ptlm_gguf* out);
int ptlm_gguf_free(ptlm_gguf g);
int ptlm_gguf_num_arrays(ptlm_gguf g, size_t* out);
int ptlm_gguf_array(ptlm_gguf g, size_t i, const char** name, ptlm_array* out);
int ptlm_gguf_num_meta(ptlm_gguf g, size_t* out);
// ptlm_gguf_meta describes metadata value i: its key, its kind, and for
// PTLM_GGUF_ARRAY the numbers as a new array (a scalar is 0-d), for
// PTLM_GGUF_STRING one string, for PTLM_GGUF_STRINGS how many (*n).
int ptlm_gguf_meta(ptlm_gguf g, size_t i, const char** key, int* kind, ptlm_array* arr, size_t* n);
// ptlm_gguf_meta_string is string j of metadata value i (j = 0 for a
// PTLM_GGUF_STRING): a pointer and a length, since GGUF strings may hold
// NUL bytes.
int ptlm_gguf_meta_string(ptlm_gguf g, size_t i, size_t j, const char** s, size_t* len);

#ifdef __cplusplus
}
#endif

#endif
