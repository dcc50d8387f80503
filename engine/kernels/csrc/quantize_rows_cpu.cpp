// Per-token (per-row) symmetric int8 quantisation of a GEMM's input, for oneDNN's u8 x s8 GEMM
// (W8A8, engine/layers/w8a8_linear.py): one pass over each row for its largest magnitude, one to
// write q = round(x / s) + 128 as uint8 (oneDNN's VNNI GEMM takes unsigned activations with a
// zero point; 128 makes the symmetric int8 code unsigned), and s = max|x| / 127 as float32.
// Done in torch ops it took seven calls a linear layer, more time than the int8 GEMM saved.
#include <ATen/ops/empty.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <tuple>

#include "bf16.h"
#include "cpu_check.h"
#include "cpu_ops.h"

namespace {

template <typename T>
void quantize_rows(const T* src, uint8_t* q, float* scales, int64_t rows, int64_t width,
                   int64_t stride) {
#pragma omp parallel for if (rows * width > kParallelGrain)
  for (int64_t r = 0; r < rows; ++r) {
    const T* __restrict x = src + r * stride;
    uint8_t* __restrict out = q + r * width;
    float amax = 0.f;
#pragma omp simd reduction(max : amax)
    for (int64_t i = 0; i < width; ++i) amax = std::max(amax, std::fabs(to_float(x[i])));
    // An all-zero row gets scale 1: its codes are all 128 (zero) either way.
    const float scale = amax > 0.f ? amax / 127.f : 1.f;
    const float inverse = 1.f / scale;
#pragma omp simd
    for (int64_t i = 0; i < width; ++i) {
      // x / s is in [-127, 127]; + 128.5 then truncation rounds half up into [1, 255].
      const float v = std::min(std::max(to_float(x[i]) * inverse, -127.f), 127.f);
      out[i] = static_cast<uint8_t>(static_cast<int32_t>(v + 128.5f));
    }
    scales[r] = scale;
  }
}

}  // namespace

std::tuple<at::Tensor, at::Tensor> quantize_rows_u8(at::Tensor x) {
  check_rows(x, "quantize_rows_u8", /*bf16_ok=*/true);
  TORCH_CHECK(x.dim() == 2, "quantize_rows_u8: expected [T, K]");
  const int64_t rows = x.size(0), width = x.size(1);
  auto q = at::empty({rows, width}, x.options().dtype(at::kByte));
  auto scales = at::empty({rows, 1}, x.options().dtype(at::kFloat));
  if (x.dtype() == at::kBFloat16) {
    quantize_rows(elements<bf16_bits>(x), q.data_ptr<uint8_t>(), scales.data_ptr<float>(), rows,
                  width, x.stride(0));
  } else {
    quantize_rows(elements<float>(x), q.data_ptr<uint8_t>(), scales.data_ptr<float>(), rows,
                  width, x.stride(0));
  }
  return {q, scales};
}
