// Scatter a step's new K and V rows into their paged-cache slots, both tensors in one call:
// index_copy_ costs two dispatches per layer and dominates for decode steps' few rows.
// A negative slot (padding) is skipped. A bfloat16 cache gets each float32 rounded to the
// nearest bf16 (ties to even), as torch's own conversion rounds.
//
//   key, value: [T, Hkv, D] float32 (rows may be strided views into the fused QKV output)
//   k_cache, v_cache: [num_blocks, block_size, Hkv, D] contiguous, float32 or bfloat16
//   slot_mapping: [T] int64
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

template <typename T>
void scatter_rows(const at::Tensor& key, const at::Tensor& value, const at::Tensor& k_cache,
                  const at::Tensor& v_cache, const int64_t* slots, int64_t width) {
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
    copy_row(kc + slot * width, k + t * k_stride, width);
    copy_row(vc + slot * width, v + t * v_stride, width);
  }
}

}  // namespace

void write_kv_cache(at::Tensor key, at::Tensor value, at::Tensor k_cache,
                    at::Tensor v_cache, at::Tensor slot_mapping) {
  check_rows(key, "write_kv_cache key");
  check_rows(value, "write_kv_cache value");
  const bool bf16 = kv_cache_is_bf16(k_cache, v_cache, "write_kv_cache");
  TORCH_CHECK(k_cache.is_contiguous() && v_cache.is_contiguous(),
              "write_kv_cache: caches must be contiguous");
  TORCH_CHECK(slot_mapping.is_contiguous() && slot_mapping.dtype() == at::kLong,
              "write_kv_cache: slot_mapping must be contiguous int64");
  const int64_t tokens = key.size(0), width = row_width(key);
  const int64_t num_slots = k_cache.size(0) * k_cache.size(1);
  TORCH_CHECK(value.size(0) == tokens && row_width(value) == width &&
                  slot_mapping.numel() == tokens && k_cache.numel() == num_slots * width &&
                  v_cache.numel() == num_slots * width,
              "write_kv_cache: shapes disagree");
  const int64_t* slots = slot_mapping.data_ptr<int64_t>();
  for (int64_t t = 0; t < tokens; ++t) {
    TORCH_CHECK(slots[t] < num_slots, "write_kv_cache: slot ", slots[t], " out of range");
  }
  if (bf16) {
    scatter_rows<bf16_bits>(key, value, k_cache, v_cache, slots, width);
  } else {
    scatter_rows<float>(key, value, k_cache, v_cache, slots, width);
  }
}
