// Scatter a step's new K and V rows into their paged-cache slots, both tensors in one call:
// index_copy_ costs two dispatches per layer and dominates for decode steps' few rows.
// A negative slot (padding) is skipped. A bfloat16 cache gets each float32 rounded to the
// nearest bf16 (ties to even), as torch's own conversion rounds; an int8 cache each head's row
// quantised against its own largest magnitude, the scale stored after it (kv_element.h).
//
//   key, value: [T, Hkv, D] float32 (rows may be strided views into the fused QKV output)
//   k_cache, v_cache: [num_blocks, block_size, Hkv, D] contiguous, float32 or bfloat16, or
//                     [num_blocks, block_size, Hkv, D + 4] int8
//   slot_mapping: [T] int64
#include <algorithm>
#include <cmath>
#include <cstring>

#include "cpu_check.h"
#include "cpu_ops.h"
#include "kv_element.h"

namespace {

inline void copy_row(float* __restrict dst, const float* __restrict src, int64_t width) {
  std::memcpy(dst, src, static_cast<size_t>(width) * sizeof(float));
}

inline void copy_row(bf16_bits* __restrict dst, const float* __restrict src, int64_t width) {
#pragma omp simd
  for (int64_t i = 0; i < width; ++i) dst[i] = round_bf16(src[i]);
}

// One token's heads, each as head_dim int8 then its float32 scale. The same arithmetic as
// engine/attention/kv_quant.py (a float32 reciprocal, then round half to even), so that both
// paths write the same bytes.
inline void copy_row(int8_t* __restrict dst, const float* __restrict src, int64_t width,
                     int64_t head_dim) {
  for (int64_t h = 0; h < width / head_dim; ++h) {
    const float* x = src + h * head_dim;
    int8_t* q = dst + h * (head_dim + kInt8ScaleBytes);
    float amax = 0.f;
    for (int64_t i = 0; i < head_dim; ++i) amax = std::max(amax, std::fabs(x[i]));
    const float inv = amax > 0.f ? 127.f / amax : 0.f;
    for (int64_t i = 0; i < head_dim; ++i) {
      const float r = std::nearbyint(x[i] * inv);
      q[i] = static_cast<int8_t>(std::min(127.f, std::max(-127.f, r)));
    }
    // A multiply by 1/127, not a division: -ffast-math would make the division one anyway.
    const float scale = amax * (1.f / 127.f);
    std::memcpy(q + head_dim, &scale, sizeof scale);
  }
}

inline void copy_row(float* __restrict dst, const float* __restrict src, int64_t width, int64_t) {
  copy_row(dst, src, width);
}

inline void copy_row(bf16_bits* __restrict dst, const float* __restrict src, int64_t width,
                     int64_t) {
  copy_row(dst, src, width);
}

template <typename T>
void scatter_rows(const at::Tensor& key, const at::Tensor& value, const at::Tensor& k_cache,
                  const at::Tensor& v_cache, const int64_t* slots, int64_t width,
                  int64_t head_dim, int64_t cache_width) {
  const int64_t tokens = key.size(0);
  const float* k = key.data_ptr<float>();
  const float* v = value.data_ptr<float>();
  T* kc = elements<T>(k_cache);
  T* vc = elements<T>(v_cache);
  const int64_t k_stride = key.stride(0), v_stride = value.stride(0);
#pragma omp parallel for if (tokens * width > kParallelGrain)
  for (int64_t t = 0; t < tokens; ++t) {
    const int64_t slot = slots[t];
    if (slot < 0) continue;
    copy_row(kc + slot * cache_width, k + t * k_stride, width, head_dim);
    copy_row(vc + slot * cache_width, v + t * v_stride, width, head_dim);
  }
}

}  // namespace

void write_kv_cache(at::Tensor key, at::Tensor value, at::Tensor k_cache,
                    at::Tensor v_cache, at::Tensor slot_mapping) {
  check_rows(key, "write_kv_cache key");
  check_rows(value, "write_kv_cache value");
  const KvType type = kv_cache_type(k_cache, v_cache, "write_kv_cache");
  TORCH_CHECK(k_cache.is_contiguous() && v_cache.is_contiguous(),
              "write_kv_cache: caches must be contiguous");
  TORCH_CHECK(slot_mapping.is_contiguous() && slot_mapping.dtype() == at::kLong,
              "write_kv_cache: slot_mapping must be contiguous int64");
  TORCH_CHECK(k_cache.dim() == 4 && key.dim() == 3, "write_kv_cache: expected key [T, Hkv, D] "
              "and caches [num_blocks, block_size, Hkv, D (+4 for int8)]");
  const int64_t tokens = key.size(0), width = row_width(key), head_dim = key.size(2);
  const int64_t cache_width = k_cache.size(2) * cache_head_width(head_dim, type);
  const int64_t num_slots = k_cache.size(0) * k_cache.size(1);
  TORCH_CHECK(value.size(0) == tokens && row_width(value) == width &&
                  slot_mapping.numel() == tokens && k_cache.size(2) == key.size(1) &&
                  k_cache.numel() == num_slots * cache_width &&
                  v_cache.numel() == num_slots * cache_width,
              "write_kv_cache: shapes disagree");
  const int64_t* slots = slot_mapping.data_ptr<int64_t>();
  for (int64_t t = 0; t < tokens; ++t) {
    TORCH_CHECK(slots[t] < num_slots, "write_kv_cache: slot ", slots[t], " out of range");
  }
  if (type == KvType::kBFloat16) {
    scatter_rows<bf16_bits>(key, value, k_cache, v_cache, slots, width, head_dim, cache_width);
  } else if (type == KvType::kInt8) {
    scatter_rows<int8_t>(key, value, k_cache, v_cache, slots, width, head_dim, cache_width);
  } else {
    scatter_rows<float>(key, value, k_cache, v_cache, slots, width, head_dim, cache_width);
  }
}
