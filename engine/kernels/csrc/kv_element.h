// The KV cache's element types: float32; bf16 held as its raw 16 bits (the top half of an IEEE
// float32); or int8 with a scale per row. The kernels are templated on the element; every read
// converts to float32 in registers, so the arithmetic is float32 whatever the cache holds, and a
// narrower cache only cuts the bytes read (bf16 by half, int8 to 17/64 of float32's at
// head_dim 64).
//
// An int8 cache row (one token, one KV head) is head_dim signed bytes followed by that row's
// float32 scale, so the cache tensor is [num_blocks, block_size, num_kv_heads, head_dim + 4]
// int8 and the scale travels with its row (one contiguous read, no second tensor to page).
// Writing rounds x * (127 / max|x|) to the nearest integer (ties to even) and stores
// max|x| * (1 / 127): each element is then within half a step (max|x| / 254) of what was written.
// engine/attention/kv_quant.py is the same format in torch.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "bf16.h"

enum class KvType { kFloat, kBFloat16, kInt8 };

constexpr int kInt8ScaleBytes = 4;

// The dtypes a KV cache may have; both caches must share one.
inline KvType kv_cache_type(const at::Tensor& k_cache, const at::Tensor& v_cache,
                            const char* what) {
  const auto dtype = k_cache.dtype();
  TORCH_CHECK(v_cache.dtype() == dtype &&
                  (dtype == at::kFloat || dtype == at::kBFloat16 || dtype == at::kChar),
              what, ": K and V caches must both be float32, both bfloat16 or both int8");
  return dtype == at::kFloat ? KvType::kFloat
         : dtype == at::kBFloat16 ? KvType::kBFloat16 : KvType::kInt8;
}

// Elements one KV head's row of a token takes in the cache: head_dim, plus the scale for int8.
inline int64_t cache_head_width(int64_t head_dim, KvType type) {
  return type == KvType::kInt8 ? head_dim + kInt8ScaleBytes : head_dim;
}

template <typename T, int D>
constexpr int kHeadWidth = D;
template <int D>
constexpr int kHeadWidth<int8_t, D> = D + kInt8ScaleBytes;

// Whether a cache of T carries a scale after each row (int8).
template <typename T>
constexpr bool kScaledRows = std::is_same_v<T, int8_t>;

inline float to_float(int8_t x) { return static_cast<float>(x); }

template <>
inline int8_t* elements<int8_t>(const at::Tensor& t) {
  return t.data_ptr<int8_t>();
}

// What a row's elements are multiplied by to give the values written: 1 but for int8.
template <typename T, int D>
inline float row_scale(const T* row) {
  if constexpr (kScaledRows<T>) {
    float scale;
    std::memcpy(&scale, row + D, sizeof scale);
    return scale;
  } else {
    return 1.f;
  }
}
