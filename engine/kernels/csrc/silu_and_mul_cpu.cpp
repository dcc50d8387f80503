// SwiGLU's elementwise half: out = silu(gate) * up, reading the fused [gate | up] projection
// ([T, 2I]) once and writing [T, I] once. float32 or bfloat16 in, the same out (a bf16 GEMM's
// product in, the next bf16 GEMM's input out); the arithmetic is float32 either way.
#include <cmath>

#include "bf16.h"
#include "cpu_check.h"
#include "cpu_ops.h"
#include "fast_exp.h"

namespace {

template <typename T>
void silu_and_mul_rows(const T* src, T* dst, int64_t rows, int64_t width, int64_t stride) {
#pragma omp parallel for if (rows * width > kParallelGrain)
  for (int64_t r = 0; r < rows; ++r) {
    const T* __restrict gate = src + r * stride;
    const T* __restrict up = gate + width;
    T* __restrict o = dst + r * width;
#pragma omp simd
    for (int64_t i = 0; i < width; ++i) {
      const float g = to_float(gate[i]);
      o[i] = from_float<T>(g / (1.f + fast_exp(-g)) * to_float(up[i]));
    }
  }
}

}  // namespace

at::Tensor silu_and_mul(at::Tensor gate_up) {
  check_rows(gate_up, "silu_and_mul", /*bf16_ok=*/true);
  TORCH_CHECK(gate_up.dim() == 2 && gate_up.size(1) % 2 == 0,
              "silu_and_mul: expected [T, 2 * intermediate]");
  const int64_t rows = gate_up.size(0), width = gate_up.size(1) / 2;
  auto out = at::empty({rows, width}, gate_up.options());
  if (gate_up.dtype() == at::kBFloat16) {
    silu_and_mul_rows(elements<bf16_bits>(gate_up), elements<bf16_bits>(out), rows, width,
                      gate_up.stride(0));
  } else {
    silu_and_mul_rows(elements<float>(gate_up), elements<float>(out), rows, width,
                      gate_up.stride(0));
  }
  return out;
}
