// RMSNorm over rows, and the fused form that first adds the residual stream:
//   rms_norm:             out = x * rsqrt(mean(x^2) + eps) * weight
//   fused_add_rms_norm_:  residual += x;  x = rms_norm(residual)        (both in place)
// torch's CPU rms_norm runs as five separate elementwise/reduction kernels; one pass per row
// here, and the fused form saves the residual add's own pass too.
//
// In the fused form x may be bfloat16 (a bf16 GEMM's product, and the next GEMM's input): it is
// widened as it is added to the float32 residual, and the normalised row is rounded back into
// it, so the casts on either side of the GEMMs cost no pass of their own.
#include <cmath>

#include "bf16.h"
#include "cpu_check.h"
#include "cpu_ops.h"

namespace {

inline float inverse_rms(const float* __restrict x, int64_t n, float eps) {
  float sum = 0.f;
#pragma omp simd reduction(+ : sum)
  for (int64_t i = 0; i < n; ++i) sum += x[i] * x[i];
  return 1.f / std::sqrt(sum / static_cast<float>(n) + eps);
}

template <typename T>
inline void scale_row(T* __restrict out, const float* __restrict x, const float* __restrict w,
                      float inv, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) out[i] = from_float<T>((x[i] * inv) * w[i]);
}

void check_weight(const at::Tensor& weight, int64_t width) {
  TORCH_CHECK(weight.is_contiguous() && weight.dtype() == at::kFloat &&
                  weight.numel() == width,
              "rms_norm: weight must be contiguous float32 of the row width");
}

template <typename T>
void add_and_norm_rows(T* xs, float* res, const float* w, int64_t rows, int64_t width,
                       int64_t x_stride, int64_t r_stride, float eps) {
#pragma omp parallel for if (rows * width > kParallelGrain)
  for (int64_t r = 0; r < rows; ++r) {
    T* __restrict xr = xs + r * x_stride;
    float* __restrict rr = res + r * r_stride;
#pragma omp simd
    for (int64_t i = 0; i < width; ++i) rr[i] += to_float(xr[i]);
    scale_row(xr, rr, w, inverse_rms(rr, width, eps), width);
  }
}

}  // namespace

at::Tensor rms_norm(at::Tensor x, at::Tensor weight, double eps) {
  check_rows(x, "rms_norm x");
  const int64_t rows = x.size(0), width = row_width(x);
  check_weight(weight, width);
  auto out = at::empty(x.sizes(), x.options());
  const float* src = x.data_ptr<float>();
  const float* w = weight.data_ptr<float>();
  float* dst = out.data_ptr<float>();
  const int64_t stride = x.stride(0);
#pragma omp parallel for if (rows * width > kParallelGrain)
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = src + r * stride;
    scale_row(dst + r * width, row, w, inverse_rms(row, width, static_cast<float>(eps)), width);
  }
  return out;
}

void fused_add_rms_norm_(at::Tensor x, at::Tensor residual, at::Tensor weight,
                         double eps) {
  check_rows(x, "fused_add_rms_norm_ x", /*bf16_ok=*/true);
  check_rows(residual, "fused_add_rms_norm_ residual");
  const int64_t rows = x.size(0), width = row_width(x);
  TORCH_CHECK(residual.size(0) == rows && row_width(residual) == width,
              "fused_add_rms_norm_: x and residual shapes disagree");
  check_weight(weight, width);
  float* res = residual.data_ptr<float>();
  const float* w = weight.data_ptr<float>();
  const auto e = static_cast<float>(eps);
  if (x.dtype() == at::kBFloat16) {
    add_and_norm_rows(elements<bf16_bits>(x), res, w, rows, width, x.stride(0),
                      residual.stride(0), e);
  } else {
    add_and_norm_rows(elements<float>(x), res, w, rows, width, x.stride(0), residual.stride(0),
                      e);
  }
}
