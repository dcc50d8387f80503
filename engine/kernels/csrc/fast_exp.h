// e^x for the kernels' vector loops (softmax weights, SiLU), written as scalar code that an
// `omp simd` loop vectorises inline for whatever ISA the build targets.
//
// With -ffast-math GCC vectorises std::exp into calls to glibc's libmvec (_ZGVeN16v_expf), and a
// call in the loop body makes the compiler spill the loop's vector registers around it. Inline,
// prefill attention (one exp per query head and context row) takes ~0.97x the time and SiLU
// ~0.9x (benchmarks/results/fast_exp_ab.json).
//
// Method (Cody-Waite, as in Cephes' expf): x = n ln2 + r with n an integer and |r| <= ln2 / 2,
// e^r = 1 + r + r^2 P(r) with P a degree-5 minimax polynomial, then times 2^n built in the
// exponent bits. Within 1 ulp of e^x where the build has FMA; the x86-64 baseline build, where
// -ffast-math may merge the two-part reduction, within 4e-6 relative (bf16 keeps 4e-3).
// Inputs are clamped to [-87, 88], so the result is a normal, finite float (or NaN for NaN):
// e^-87 is ~1.6e-38 where e^x would underflow, and nothing the kernels compute reaches the top.
#pragma once

#include <cmath>
#include <cstdint>

#include "float_bits.h"

// a * b + c rounded once where the build has FMA; elsewhere (the x86-64 baseline build) the two
// roundings, since std::fma there is a libm call that would stop the loop vectorising.
inline float fused_multiply_add(float a, float b, float c) {
#ifdef __FMA__
  return __builtin_fmaf(a, b, c);
#else
  return a * b + c;
#endif
}

inline float fast_exp(float x) {
  // NaN in, NaN out: the clamp below would turn it into a number (-ffast-math makes it min/max,
  // which drop a NaN). So a NaN is told by its bits, which -ffast-math cannot fold away, and put
  // back by a mask (all ones for a NaN: 0x7f800000 - magnitude is negative only for one), as
  // arithmetic: a conditional here kept GCC from vectorising the loops.
  const uint32_t x_bits = bits_of(x);
  const uint32_t nan_mask =
      static_cast<uint32_t>(static_cast<int32_t>(0x7f800000u - (x_bits & 0x7fffffffu)) >> 31);
  constexpr float kLog2e = 1.44269504088896341f;
  // ln 2 in two parts: n * kLn2High is exact for the n the clamp allows.
  constexpr float kLn2High = 0.693359375f, kLn2Low = -2.12194440e-4f;
  x = std::fmin(std::fmax(x, -87.f), 88.f);
  // n = round(x / ln 2). nearbyint is one instruction from SSE4.1 on; below that (the x86-64
  // baseline build) it is a libm call, so a truncating conversion of x / ln 2 +- 0.5 instead.
#ifdef __SSE4_1__
  const int32_t n = static_cast<int32_t>(std::nearbyint(x * kLog2e));
#else
  const float scaled = x * kLog2e;
  const int32_t n = static_cast<int32_t>(scaled + std::copysign(0.5f, scaled));
#endif
  const float nf = static_cast<float>(n);
  const float r = fused_multiply_add(nf, -kLn2Low, fused_multiply_add(nf, -kLn2High, x));
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float e_r = p * (r * r) + (r + 1.f);
  // 2^n as a float: n + 127 in the exponent field (n is in [-126, 127] after the clamp).
  const float e_x = e_r * float_of(static_cast<uint32_t>(n + 127) << 23);
  return float_of((bits_of(e_x) & ~nan_mask) | (x_bits & nan_mask));
}
