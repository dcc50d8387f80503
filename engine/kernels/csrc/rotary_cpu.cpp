// Rotary position embedding, HF's rotate-half convention, in place on a step's queries and keys:
//   x[i] <- x[i] * cos[i] - x[i + D/2] * sin[i],   x[i + D/2] <- x[i + D/2] * cos[i] + x[i] * sin[i]
// One pass over q and k where the torch expression allocates four temporaries and a concat per
// tensor per layer. q and k may be strided views into the fused QKV projection's output.
//
//   query: [T, H, D], key: [T, Hkv, D];  cos, sin: [T, D/2] (the step's rows of the table)
#include "cpu_check.h"
#include "cpu_ops.h"

namespace {

inline void rotate_heads(float* x, int64_t heads, int64_t half, const float* __restrict cos,
                         const float* __restrict sin) {
  for (int64_t h = 0; h < heads; ++h) {
    float* __restrict x1 = x + h * 2 * half;
    float* __restrict x2 = x1 + half;
#pragma omp simd
    for (int64_t i = 0; i < half; ++i) {
      const float a = x1[i], b = x2[i];
      x1[i] = a * cos[i] - b * sin[i];
      x2[i] = b * cos[i] + a * sin[i];
    }
  }
}

}  // namespace

void rotary_embedding_(at::Tensor query, at::Tensor key, at::Tensor cos,
                       at::Tensor sin) {
  check_rows(query, "rotary_embedding_ query");
  check_rows(key, "rotary_embedding_ key");
  TORCH_CHECK(query.dim() == 3 && key.dim() == 3, "rotary_embedding_: q and k are [T, heads, D]");
  const int64_t tokens = query.size(0), head_dim = query.size(2), half = head_dim / 2;
  TORCH_CHECK(key.size(0) == tokens && key.size(2) == head_dim && head_dim % 2 == 0,
              "rotary_embedding_: q and k shapes disagree");
  TORCH_CHECK(cos.is_contiguous() && sin.is_contiguous() && cos.dtype() == at::kFloat &&
                  sin.dtype() == at::kFloat && cos.numel() == tokens * half &&
                  sin.numel() == tokens * half,
              "rotary_embedding_: cos and sin must be contiguous float32 [T, D/2]");
  float* q = query.data_ptr<float>();
  float* k = key.data_ptr<float>();
  const float* c = cos.data_ptr<float>();
  const float* s = sin.data_ptr<float>();
  const int64_t q_heads = query.size(1), k_heads = key.size(1);
  const int64_t q_stride = query.stride(0), k_stride = key.stride(0);
#pragma omp parallel for if (tokens * (q_heads + k_heads) * head_dim > kParallelGrain)
  for (int64_t t = 0; t < tokens; ++t) {
    rotate_heads(q + t * q_stride, q_heads, half, c + t * half, s + t * half);
    rotate_heads(k + t * k_stride, k_heads, half, c + t * half, s + t * half);
  }
}
