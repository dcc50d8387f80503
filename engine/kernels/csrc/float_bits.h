// A float32's bits and back, as a copy (no branch, no call, vectorised by GCC): for the kernels'
// integer arithmetic on floats (bf16 rounding, NaN tests -ffast-math cannot fold away, 2^n).
#pragma once

#include <cstdint>
#include <cstring>

inline uint32_t bits_of(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  return bits;
}

inline float float_of(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}
