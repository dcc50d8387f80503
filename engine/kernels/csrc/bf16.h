// bf16 as its raw 16 bits (the top half of an IEEE float32), for kernels that read or write bf16
// and compute in float32: the bf16 KV cache, and a bf16 GEMM's activations on either side of it.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

#include "float_bits.h"

using bf16_bits = uint16_t;

inline float to_float(float x) { return x; }

// bf16 -> float32 is exact: the 16 bits become the float's high half. Written as a shift and a
// bit copy (no branch, no call) so that GCC vectorises the loops that use it.
inline float to_float(bf16_bits x) { return float_of(static_cast<uint32_t>(x) << 16); }

// float32 -> bf16, rounded to nearest, ties to even (what torch's .to(torch.bfloat16) does);
// a NaN stays a (quiet) NaN instead of rounding into infinity. Integer arithmetic only, so
// -ffast-math cannot change it.
inline bf16_bits round_bf16(float f) {
  const uint32_t bits = bits_of(f);
  const uint32_t rounded = (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;
  const bool nan = (bits & 0x7fffffffu) > 0x7f800000u;
  return static_cast<bf16_bits>(nan ? ((bits >> 16) | 0x40u) : rounded);
}

// Stores a float32 result as the element type T (rounded to nearest-even for bf16).
template <typename T>
inline T from_float(float f);

template <>
inline float from_float<float>(float f) {
  return f;
}

template <>
inline bf16_bits from_float<bf16_bits>(float f) {
  return round_bf16(f);
}

// A float32 or bfloat16 tensor's elements as float or bf16_bits.
template <typename T>
inline T* elements(const at::Tensor& t);

template <>
inline float* elements<float>(const at::Tensor& t) {
  return t.data_ptr<float>();
}

template <>
inline bf16_bits* elements<bf16_bits>(const at::Tensor& t) {
  return reinterpret_cast<bf16_bits*>(t.data_ptr<at::BFloat16>());
}
