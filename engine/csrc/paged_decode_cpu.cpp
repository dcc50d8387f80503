// Paged decode attention for the CPU: one query token per sequence, reading K/V in place through
// the block table (no gather into a padded copy, which triples memory traffic on the hot path).
//
// Work item = (sequence, KV head). Its G = num_heads / num_kv_heads query heads share every K/V
// row read, so each row is read once per step. Online softmax keeps one pass over the context.
//
//   k_cache, v_cache: [num_blocks, block_size, num_kv_heads, head_dim]  (contiguous, float)
//   query, out:       [num_seqs, num_heads, head_dim]
//   block_tables:     [num_seqs, max_blocks] int32;  seq_lens: [num_seqs] int32
#include <torch/extension.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace {

template <int D>
inline float dot(const float* __restrict a, const float* __restrict b) {
  float sum = 0.f;
#pragma omp simd reduction(+ : sum)
  for (int i = 0; i < D; ++i) sum += a[i] * b[i];
  return sum;
}

template <int D>
inline void scale_add(float* __restrict acc, float alpha, const float* __restrict v, float p) {
#pragma omp simd
  for (int i = 0; i < D; ++i) acc[i] = acc[i] * alpha + p * v[i];
}

template <int D, int G>
void decode_one(const float* q, const float* k_cache, const float* v_cache, const int* table,
                int seq_len, int block_size, int num_kv_heads, int kv_head, float scale,
                float* out) {
  // q and out point at this KV head's first query head; the G heads are contiguous.
  // One KV block at a time: its scores (one dot product per token and head), then the running
  // sums rescaled once per block, and the block's exponentials in one vectorised loop (with
  // -ffast-math GCC calls glibc's vector expf).
  constexpr int kMaxBlock = 128;
  float m[G], l[G];
  alignas(64) float acc[G][D];
  alignas(64) float qs[G][D];
  alignas(64) float p[G][kMaxBlock];
  for (int g = 0; g < G; ++g) {
    m[g] = -std::numeric_limits<float>::max();
    l[g] = 0.f;
    for (int i = 0; i < D; ++i) {
      acc[g][i] = 0.f;
      qs[g][i] = q[g * D + i] * scale;
    }
  }
  const int64_t row_stride = static_cast<int64_t>(num_kv_heads) * D;
  const int num_blocks = (seq_len + block_size - 1) / block_size;
  for (int b = 0; b < num_blocks; ++b) {
    const int n = std::min(block_size, seq_len - b * block_size);
    const int64_t base = static_cast<int64_t>(table[b]) * block_size * row_stride +
                         static_cast<int64_t>(kv_head) * D;
    const float* k = k_cache + base;
    const float* v = v_cache + base;
    for (int t = 0; t < n; ++t) {
      const float* kt = k + t * row_stride;
      for (int g = 0; g < G; ++g) p[g][t] = dot<D>(qs[g], kt);
    }
    for (int g = 0; g < G; ++g) {
      float block_max = m[g];
      for (int t = 0; t < n; ++t) block_max = std::max(block_max, p[g][t]);
      const float alpha = std::exp(m[g] - block_max);
      float sum = 0.f;
      float* pg = p[g];
#pragma omp simd reduction(+ : sum)
      for (int t = 0; t < n; ++t) {
        pg[t] = std::exp(pg[t] - block_max);
        sum += pg[t];
      }
      m[g] = block_max;
      l[g] = l[g] * alpha + sum;
      float* a = acc[g];
#pragma omp simd
      for (int i = 0; i < D; ++i) a[i] *= alpha;
    }
    for (int t = 0; t < n; ++t) {
      const float* vt = v + t * row_stride;
      for (int g = 0; g < G; ++g) scale_add<D>(acc[g], 1.f, vt, p[g][t]);
    }
  }
  for (int g = 0; g < G; ++g) {
    const float inv = l[g] > 0.f ? 1.f / l[g] : 0.f;
    for (int i = 0; i < D; ++i) out[g * D + i] = acc[g][i] * inv;
  }
}

template <int D, int G>
void decode_all(const torch::Tensor& query, const torch::Tensor& k_cache,
                const torch::Tensor& v_cache, const torch::Tensor& block_tables,
                const torch::Tensor& seq_lens, double scale, torch::Tensor& out) {
  const int num_seqs = query.size(0);
  const int num_heads = query.size(1);
  const int num_kv_heads = k_cache.size(2);
  const int block_size = k_cache.size(1);
  const int max_blocks = block_tables.size(1);
  const float* q = query.data_ptr<float>();
  const float* kc = k_cache.data_ptr<float>();
  const float* vc = v_cache.data_ptr<float>();
  const int* tables = block_tables.data_ptr<int>();
  const int* lens = seq_lens.data_ptr<int>();
  float* o = out.data_ptr<float>();
#pragma omp parallel for collapse(2) schedule(dynamic, 1)
  for (int s = 0; s < num_seqs; ++s) {
    for (int h = 0; h < num_kv_heads; ++h) {
      const int64_t offset = (static_cast<int64_t>(s) * num_heads + h * G) * D;
      decode_one<D, G>(q + offset, kc, vc, tables + static_cast<int64_t>(s) * max_blocks,
                       lens[s], block_size, num_kv_heads, h, static_cast<float>(scale),
                       o + offset);
    }
  }
}

using DecodeFn = void (*)(const torch::Tensor&, const torch::Tensor&, const torch::Tensor&,
                          const torch::Tensor&, const torch::Tensor&, double, torch::Tensor&);

template <int D>
DecodeFn pick_group(int group) {
  switch (group) {
    case 1: return decode_all<D, 1>;
    case 2: return decode_all<D, 2>;
    case 3: return decode_all<D, 3>;
    case 4: return decode_all<D, 4>;
    case 5: return decode_all<D, 5>;
    case 6: return decode_all<D, 6>;
    case 7: return decode_all<D, 7>;
    case 8: return decode_all<D, 8>;
    default: return nullptr;
  }
}

}  // namespace

bool supports(int64_t head_dim, int64_t group) {
  const bool dim_ok = head_dim == 16 || head_dim == 32 || head_dim == 64 || head_dim == 128;
  return dim_ok && group >= 1 && group <= 8;
}

void paged_decode(torch::Tensor query, torch::Tensor k_cache, torch::Tensor v_cache,
                  torch::Tensor block_tables, torch::Tensor seq_lens, double scale,
                  torch::Tensor out) {
  TORCH_CHECK(query.dtype() == torch::kFloat32 && k_cache.dtype() == torch::kFloat32,
              "paged_decode: float32 only");
  TORCH_CHECK(query.is_contiguous() && out.is_contiguous() && k_cache.is_contiguous() &&
                  v_cache.is_contiguous() && block_tables.is_contiguous(),
              "paged_decode: tensors must be contiguous");
  TORCH_CHECK(block_tables.dtype() == torch::kInt32 && seq_lens.dtype() == torch::kInt32,
              "paged_decode: block_tables and seq_lens must be int32");
  const int64_t head_dim = query.size(2);
  const int64_t group = query.size(1) / k_cache.size(2);
  TORCH_CHECK(supports(head_dim, group), "paged_decode: unsupported head_dim/group");
  TORCH_CHECK(k_cache.size(1) <= 128, "paged_decode: block_size above 128");
  DecodeFn fn = head_dim == 16   ? pick_group<16>(group)
                : head_dim == 32 ? pick_group<32>(group)
                : head_dim == 64 ? pick_group<64>(group)
                                 : pick_group<128>(group);
  fn(query, k_cache, v_cache, block_tables, seq_lens, scale, out);
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("paged_decode", &paged_decode, "paged decode attention (float32, CPU)");
  m.def("supports", &supports, "whether a head_dim / GQA group is compiled in");
}
