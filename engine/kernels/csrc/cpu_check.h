// Argument checks shared by the row-wise CPU kernels.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/util/Exception.h>

#include <algorithm>

// A [rows, ..., width] float32 CPU tensor (or bfloat16 where `bf16_ok`) whose rows may be
// strided (views into a fused projection's output) but whose elements within a row are
// contiguous.
inline void check_rows(const at::Tensor& t, const char* what, bool bf16_ok = false) {
  const bool dtype_ok = t.dtype() == at::kFloat || (bf16_ok && t.dtype() == at::kBFloat16);
  TORCH_CHECK(t.device().is_cpu() && dtype_ok, what,
              bf16_ok ? ": float32 or bfloat16 CPU tensor expected"
                      : ": float32 CPU tensor expected");
  TORCH_CHECK(t.dim() >= 2, what, ": expected at least 2 dimensions");
  int64_t expected = 1;
  for (int64_t d = t.dim() - 1; d >= 1; --d) {
    TORCH_CHECK(t.size(d) == 1 || t.stride(d) == expected, what, ": each row must be contiguous");
    expected *= t.size(d);
  }
}

inline int64_t row_width(const at::Tensor& t) {
  int64_t width = 1;
  for (int64_t d = 1; d < t.dim(); ++d) width *= t.size(d);
  return width;
}

// Parallelise over rows only when there is enough work to pay for waking the threads.
constexpr int64_t kParallelGrain = 1 << 14;  // elements
