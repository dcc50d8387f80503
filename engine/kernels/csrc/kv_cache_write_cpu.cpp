// Scatter a step's new K and V rows into their paged-cache slots, both tensors in one call:
// index_copy_ costs two dispatches per layer and dominates for decode steps' few rows.
// A negative slot (padding) is skipped.
//
//   key, value: [T, Hkv, D] (rows may be strided views into the fused QKV output)
//   k_cache, v_cache: [num_blocks, block_size, Hkv, D] contiguous;  slot_mapping: [T] int64
#include <cstring>

#include "cpu_check.h"
#include "cpu_ops.h"

void write_kv_cache(at::Tensor key, at::Tensor value, at::Tensor k_cache,
                    at::Tensor v_cache, at::Tensor slot_mapping) {
  check_rows(key, "write_kv_cache key");
  check_rows(value, "write_kv_cache value");
  TORCH_CHECK(k_cache.is_contiguous() && v_cache.is_contiguous() &&
                  k_cache.dtype() == at::kFloat && v_cache.dtype() == at::kFloat,
              "write_kv_cache: caches must be contiguous float32");
  TORCH_CHECK(slot_mapping.is_contiguous() && slot_mapping.dtype() == at::kLong,
              "write_kv_cache: slot_mapping must be contiguous int64");
  const int64_t tokens = key.size(0), width = row_width(key);
  const int64_t num_slots = k_cache.size(0) * k_cache.size(1);
  TORCH_CHECK(value.size(0) == tokens && row_width(value) == width &&
                  slot_mapping.numel() == tokens && k_cache.numel() == num_slots * width &&
                  v_cache.numel() == num_slots * width,
              "write_kv_cache: shapes disagree");
  const float* k = key.data_ptr<float>();
  const float* v = value.data_ptr<float>();
  float* kc = k_cache.data_ptr<float>();
  float* vc = v_cache.data_ptr<float>();
  const int64_t* slots = slot_mapping.data_ptr<int64_t>();
  const int64_t k_stride = key.stride(0), v_stride = value.stride(0);
  for (int64_t t = 0; t < tokens; ++t) {
    TORCH_CHECK(slots[t] < num_slots, "write_kv_cache: slot ", slots[t], " out of range");
  }
  const size_t bytes = static_cast<size_t>(width) * sizeof(float);
#pragma omp parallel for if (tokens * width > kParallelGrain)
  for (int64_t t = 0; t < tokens; ++t) {
    const int64_t slot = slots[t];
    if (slot < 0) continue;
    std::memcpy(kc + slot * width, k + t * k_stride, bytes);
    std::memcpy(vc + slot * width, v + t * v_stride, bytes);
  }
}
