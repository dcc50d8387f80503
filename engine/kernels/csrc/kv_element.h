// The KV cache's element types: float32, or bf16 held as its raw 16 bits (the top half of an
// IEEE float32). The kernels are templated on the element; every read converts to float32 in
// registers, so the arithmetic is float32 either way and a bf16 cache only halves the bytes read.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>

#include "bf16.h"

// The dtypes a KV cache may have; both caches must share one.
inline bool kv_cache_is_bf16(const at::Tensor& k_cache, const at::Tensor& v_cache,
                             const char* what) {
  TORCH_CHECK(k_cache.dtype() == v_cache.dtype() &&
                  (k_cache.dtype() == at::kFloat || k_cache.dtype() == at::kBFloat16),
              what, ": K and V caches must both be float32 or both bfloat16");
  return k_cache.dtype() == at::kBFloat16;
}
