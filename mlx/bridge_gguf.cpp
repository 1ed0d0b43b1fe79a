// bridge_gguf.cpp: GGUF files through mlx::core::load_gguf. Every function
// catches all C++ exceptions (PTLM_TRY).
#include <memory>
#include <utility>

#include "bridge_gguf.h"
#include "bridge_internal.h"

using namespace ptlm;

namespace {
struct GGUF {
  std::vector<std::pair<std::string, mx::array>> arrays;
  std::vector<std::pair<std::string, mx::GGUFMetaData>> meta;
};
GGUF& G(ptlm_gguf g) {
  if (g == nullptr) throw std::invalid_argument("nil GGUF handle");
  return *reinterpret_cast<GGUF*>(g);
}
const mx::GGUFMetaData& meta_at(ptlm_gguf g, size_t i) { return G(g).meta.at(i).second; }
}  // namespace

extern "C" {

int ptlm_load_gguf(const char* path, ptlm_gguf* out) {
  PTLM_TRY({
    auto [arrs, meta] = mx::load_gguf(std::string(path));
    auto g = std::make_unique<GGUF>();
    for (auto& kv : arrs) g->arrays.emplace_back(kv.first, kv.second);
    for (auto& kv : meta) g->meta.emplace_back(kv.first, kv.second);
    *out = reinterpret_cast<ptlm_gguf>(g.release());
  })
}

int ptlm_gguf_free(ptlm_gguf g) { PTLM_TRY(delete reinterpret_cast<GGUF*>(g)) }
int ptlm_gguf_num_arrays(ptlm_gguf g, size_t* out) { PTLM_TRY(*out = G(g).arrays.size()) }
int ptlm_gguf_num_meta(ptlm_gguf g, size_t* out) { PTLM_TRY(*out = G(g).meta.size()) }

int ptlm_gguf_array(ptlm_gguf g, size_t i, const char** name, ptlm_array* out) {
  PTLM_TRY({
    auto& e = G(g).arrays.at(i);
    *name = e.first.c_str();
    *out = wrap(e.second);
  })
}

int ptlm_gguf_meta(ptlm_gguf g, size_t i, const char** key, int* kind, ptlm_array* arr, size_t* n) {
  PTLM_TRY({
    auto& e = G(g).meta.at(i);
    *key = e.first.c_str();
    *arr = nullptr;
    *n = 0;
    if (auto a = std::get_if<mx::array>(&e.second)) {
      *kind = PTLM_GGUF_ARRAY;
      *arr = wrap(*a);
    } else if (std::holds_alternative<std::string>(e.second)) {
      *kind = PTLM_GGUF_STRING;
      *n = 1;
    } else if (auto v = std::get_if<std::vector<std::string>>(&e.second)) {
      *kind = PTLM_GGUF_STRINGS;
      *n = v->size();
    } else {
      *kind = PTLM_GGUF_NONE;
    }
  })
}

int ptlm_gguf_meta_string(ptlm_gguf g, size_t i, size_t j, const char** s, size_t* len) {
  PTLM_TRY({
    auto& v = meta_at(g, i);
    const std::string* str = nullptr;
    if (auto one = std::get_if<std::string>(&v)) {
      if (j != 0) throw std::out_of_range("string index " + std::to_string(j) + " of a single string");
      str = one;
    } else if (auto many = std::get_if<std::vector<std::string>>(&v)) {
      str = &many->at(j);
    } else {
      throw std::invalid_argument("metadata value " + std::to_string(i) + " holds no strings");
    }
    *s = str->data();
    *len = str->size();
  })
}

}  // extern "C"
