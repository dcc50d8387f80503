// The KV cache's element types: float32, or bf16 held as its raw 16 bits (the top half of an
// IEEE float32). The kernels are templated on the element; every read converts to float32 in
// registers, so the arithmetic is float32 either way and a bf16 cache only halves the bytes read.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>

#include <cstdint>
#include <cstring>

using bf16_bits = uint16_t;

inline float kv_load(float x) { return x; }

// bf16 -> float32 is exact: the 16 bits become the float's high half. Written as a shift and a
// bit copy (no branch, no call) so that GCC vectorises the loops that use it.
inline float kv_load(bf16_bits x) {
  const uint32_t bits = static_cast<uint32_t>(x) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// float32 -> bf16, rounded to nearest, ties to even (what torch's .to(torch.bfloat16) does);
// a NaN stays a (quiet) NaN instead of rounding into infinity. Integer arithmetic only, so
// -ffast-math cannot change it.
inline bf16_bits kv_round_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  const uint32_t rounded = (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;
  const bool nan = (bits & 0x7fffffffu) > 0x7f800000u;
  return static_cast<bf16_bits>(nan ? ((bits >> 16) | 0x40u) : rounded);
}

// The cache tensor's elements as the kernel's element type.
template <typename T>
inline T* kv_data(const at::Tensor& cache);

template <>
inline float* kv_data<float>(const at::Tensor& cache) {
  return cache.data_ptr<float>();
}

template <>
inline bf16_bits* kv_data<bf16_bits>(const at::Tensor& cache) {
  return reinterpret_cast<bf16_bits*>(cache.data_ptr<at::BFloat16>());
}

// The dtypes a KV cache may have; both caches must share one.
inline bool kv_cache_is_bf16(const at::Tensor& k_cache, const at::Tensor& v_cache,
                             const char* what) {
  TORCH_CHECK(k_cache.dtype() == v_cache.dtype() &&
                  (k_cache.dtype() == at::kFloat || k_cache.dtype() == at::kBFloat16),
              what, ": K and V caches must both be float32 or both bfloat16");
  return k_cache.dtype() == at::kBFloat16;
}
