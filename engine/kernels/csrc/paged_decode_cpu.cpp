// Paged decode attention for the CPU: one query token per sequence, reading K/V in place through
// the block table (no gather into a padded copy, which triples memory traffic on the hot path).
//
// Work item = (sequence, slice of its KV heads). With enough sequences to keep every thread busy
// the slice is all the heads, so each K/V block (block_size * num_kv_heads * head_dim elements,
// a few KB) is one contiguous run, read head by head. With few sequences the heads are
// split across items so that both cores still work. The G = num_heads / num_kv_heads query
// heads of a KV head share every K/V row read, widened to float32 once; the per-block arithmetic
// is in decode_block_ops.h. Online softmax keeps one pass over the context.
//
// Decode attention is bound by memory: blocks lie anywhere in the pool, and a jump to a block
// the hardware prefetcher could not foresee cost ~2x over a sequence's blocks laid out in order
// (measured: 64 sequences x 30 layers, bf16, block 16). So while one block is worked on, the
// next block in the table is asked for row by row, which brings random order within ~1.4x of
// in-order.
//
//   k_cache, v_cache: [num_blocks, block_size, num_kv_heads, head_dim]  (contiguous, float32 or
//                     bfloat16: a bf16 row is widened to float32 as it is read; or int8
//                     [..., head_dim + 4], each row with its scale: kv_element.h)
//   query, out:       [num_seqs, num_heads, head_dim]  (query float32, its rows may be strided;
//                     out float32 or bfloat16, rounded nearest-even for a bf16 GEMM after it)
//   block_tables:     [num_seqs, max_blocks] int32;  seq_lens: [num_seqs] int32
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "cpu_check.h"
#include "cpu_ops.h"
#include "decode_block_ops.h"
#include "fast_exp.h"
#include "kv_element.h"

namespace {

constexpr int kMaxBlock = 128;      // largest block_size
constexpr int kMaxItemHeads = 64;   // query heads one work item holds state for
constexpr int kItemsPerThread = 8;  // enough items per thread to even out ragged lengths
constexpr float kNoScoreYet = -std::numeric_limits<float>::max();  // a head's max before any row

// Running softmax state of one work item: H query heads over [kv_begin, kv_begin + H / G).
template <int D>
struct DecodeState {
  float m[kMaxItemHeads];
  float l[kMaxItemHeads];
  alignas(64) float acc[kMaxItemHeads][D];
  alignas(64) float q[kMaxItemHeads][D];
  alignas(64) float p[kMaxItemHeads][kMaxBlock];
};

// Folds one block's scores p[h][0..n) into the running max/sum and rescales the accumulators;
// leaves p[h][t] = exp(score - new max), ready to weight the block's values.
template <int D>
inline void softmax_block(DecodeState<D>& s, int heads, int n) {
  for (int h = 0; h < heads; ++h) {
    float* ph = s.p[h];
    float block_max = s.m[h];
    for (int t = 0; t < n; ++t) block_max = std::max(block_max, ph[t]);
    // Before the first chunk there is nothing to rescale (acc and l are 0), and exp's underflow
    // path from -FLT_MAX was ~1 % of a prefill: every short row's item pays it once per head.
    const float alpha = s.m[h] == kNoScoreYet ? 0.f : std::exp(s.m[h] - block_max);
    float sum = 0.f;
#pragma omp simd reduction(+ : sum)
    for (int t = 0; t < n; ++t) {
      ph[t] = fast_exp(ph[t] - block_max);
      sum += ph[t];
    }
    s.m[h] = block_max;
    s.l[h] = s.l[h] * alpha + sum;
    float* a = s.acc[h];
#pragma omp simd
    for (int i = 0; i < D; ++i) a[i] *= alpha;
  }
}

// The item's normalised outputs, back in the row's own element order, as float32 or rounded to
// bf16 (when the next GEMM multiplies bf16, which would otherwise cast them in a pass of its own).
template <int D, typename T, typename O>
void store_output(const DecodeState<D>& s, int heads, O* out) {
  for (int h = 0; h < heads; ++h)
    store_head<D, T>(s.acc[h], s.l[h] > 0.f ? 1.f / s.l[h] : 0.f, out + h * D);
}

template <int D, int G, typename T>
void decode_item(const float* q, const T* k_cache, const T* v_cache, const int* table,
                 int seq_len, int block_size, int num_kv_heads, int kv_begin, int kv_end,
                 float scale, void* out, bool out_bf16) {
  // q and out point at the sequence's first query head; heads are [kv_head][g] contiguous.
  const int kv_heads = kv_end - kv_begin;
  const int heads = kv_heads * G;
  DecodeState<D> s;
  const float* q_item = q + static_cast<int64_t>(kv_begin) * G * D;
  for (int h = 0; h < heads; ++h) {
    s.m[h] = kNoScoreYet;
    s.l[h] = 0.f;
    std::fill_n(s.acc[h], D, 0.f);
    load_query<D, T>(q_item + h * D, scale, s.q[h]);
  }
  constexpr int W = kHeadWidth<T, D>;  // a head's elements in a cache row
  const int64_t row_stride = static_cast<int64_t>(num_kv_heads) * W;
  const int num_blocks = (seq_len + block_size - 1) / block_size;
  auto block_start = [&](int block) {
    return (static_cast<int64_t>(block) * block_size * row_stride) +
           static_cast<int64_t>(kv_begin) * W;
  };
  // The softmax folds in a chunk of up to kMaxBlock rows at a time (several blocks): its
  // per-fold work (max, rescaling the accumulators, rounding weights) is then paid once per
  // chunk rather than once per block.
  const int blocks_per_chunk = std::max(1, kMaxBlock / block_size);
  for (int first = 0; first < num_blocks; first += blocks_per_chunk) {
    const int last = std::min(num_blocks, first + blocks_per_chunk);
    // Each pass over a block's rows also asks for the same rows of the next block.
    auto rows_of = [&](int b, const T* cache, const T** rows, const T** next) {
      *rows = cache + block_start(table[b]);
      *next = cache + block_start(table[b + 1 < num_blocks ? b + 1 : b]);
      return std::min(block_size, seq_len - b * block_size);
    };
    int rows = 0;
    for (int b = first; b < last; ++b) {
      const T *k, *next_k;
      const int n = rows_of(b, k_cache, &k, &next_k);
      for (int kh = 0; kh < kv_heads; ++kh)
        score_block<D, G, T>(s.q[kh * G], s.p[kh * G] + rows, kMaxBlock, k + kh * W,
                             next_k + kh * W, row_stride, n);
      rows += n;
    }
    softmax_block<D>(s, heads, rows);
    rows = 0;
    for (int b = first; b < last; ++b) {
      const T *v, *next_v;
      const int n = rows_of(b, v_cache, &v, &next_v);
      for (int kh = 0; kh < kv_heads; ++kh)
        accumulate_block<D, G, T>(s.acc[kh * G], s.p[kh * G] + rows, kMaxBlock, v + kh * W,
                                  next_v + kh * W, row_stride, n);
      rows += n;
    }
  }
  const int64_t first_out = static_cast<int64_t>(kv_begin) * G * D;
  if (out_bf16) {
    store_output<D, T>(s, heads, static_cast<bf16_bits*>(out) + first_out);
  } else {
    store_output<D, T>(s, heads, static_cast<float*>(out) + first_out);
  }
}

// How many slices each sequence's KV heads are cut into: one (whole rows) when there are
// enough sequences to share out, more when there are few, and always few enough heads per
// item to fit DecodeState.
int head_slices(int num_seqs, int num_kv_heads, int group) {
  const int threads = omp_get_max_threads();
  const int wanted = (threads * kItemsPerThread + num_seqs - 1) / num_seqs;
  // An even split into n slices gives some slice ceil(H / n) KV heads, so n must make that at
  // most the KV heads whose G query heads fit the state (e.g. 25 KV heads x G 5: 3 slices).
  const int kv_heads_per_state = kMaxItemHeads / group;
  const int min_for_state = (num_kv_heads + kv_heads_per_state - 1) / kv_heads_per_state;
  return std::min(num_kv_heads, std::max({1, wanted, min_for_state}));
}

template <int D, int G, typename T>
void decode_all(const at::Tensor& query, const at::Tensor& k_cache,
                const at::Tensor& v_cache, const at::Tensor& block_tables,
                const at::Tensor& seq_lens, double scale, at::Tensor& out) {
  const int num_seqs = query.size(0);
  const int num_heads = query.size(1);
  const int num_kv_heads = k_cache.size(2);
  const int block_size = k_cache.size(1);
  const int max_blocks = block_tables.size(1);
  const float* q = query.data_ptr<float>();
  const T* kc = elements<T>(k_cache);
  const T* vc = elements<T>(v_cache);
  const int* tables = block_tables.data_ptr<int>();
  const int* lens = seq_lens.data_ptr<int>();
  const bool out_bf16 = out.dtype() == at::kBFloat16;
  char* o = static_cast<char*>(out.data_ptr());
  const int64_t out_row_bytes = static_cast<int64_t>(num_heads) * D * out.element_size();
  const int64_t q_stride = query.stride(0);
  const int slices = head_slices(num_seqs, num_kv_heads, G);
#pragma omp parallel for collapse(2) schedule(dynamic, 1)
  for (int s = 0; s < num_seqs; ++s) {
    for (int slice = 0; slice < slices; ++slice) {
      // Even split of the KV heads: slice i gets [i*H/n, (i+1)*H/n).
      const int kv_begin = slice * num_kv_heads / slices;
      const int kv_end = (slice + 1) * num_kv_heads / slices;
      const int64_t offset = s * out_row_bytes;
      decode_item<D, G, T>(q + s * q_stride, kc, vc, tables + static_cast<int64_t>(s) * max_blocks,
                        lens[s], block_size, num_kv_heads, kv_begin, kv_end,
                        static_cast<float>(scale), o + offset, out_bf16);
    }
  }
}

using DecodeFn = void (*)(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                          const at::Tensor&, const at::Tensor&, double, at::Tensor&);

template <int D, typename T>
DecodeFn pick_group(int group) {
  switch (group) {
    case 1: return decode_all<D, 1, T>;
    case 2: return decode_all<D, 2, T>;
    case 3: return decode_all<D, 3, T>;
    case 4: return decode_all<D, 4, T>;
    case 5: return decode_all<D, 5, T>;
    case 6: return decode_all<D, 6, T>;
    case 7: return decode_all<D, 7, T>;
    case 8: return decode_all<D, 8, T>;
    default: return nullptr;
  }
}

template <typename T>
DecodeFn pick_decode(int64_t head_dim, int64_t group) {
  const int g = static_cast<int>(group);
  return head_dim == 16   ? pick_group<16, T>(g)
         : head_dim == 32 ? pick_group<32, T>(g)
         : head_dim == 64 ? pick_group<64, T>(g)
                          : pick_group<128, T>(g);
}

}  // namespace

bool paged_decode_supports(int64_t head_dim, int64_t group) {
  const bool dim_ok = head_dim == 16 || head_dim == 32 || head_dim == 64 || head_dim == 128;
  return dim_ok && group >= 1 && group <= 8;
}

namespace {

// Every block a sequence reads must be a real block: a bad id or a length past its table would
// read (and the caller would trust) memory that is not the cache, so refuse before any thread runs.
void check_block_tables(const at::Tensor& block_tables, const at::Tensor& seq_lens,
                        int64_t num_blocks, int64_t block_size) {
  const int64_t num_seqs = seq_lens.numel(), max_blocks = block_tables.size(1);
  const int* tables = block_tables.data_ptr<int>();
  const int* lens = seq_lens.data_ptr<int>();
  for (int64_t s = 0; s < num_seqs; ++s) {
    TORCH_CHECK(lens[s] >= 0 && lens[s] <= max_blocks * block_size, "paged_decode: sequence ", s,
                " has length ", lens[s], ", beyond its block table of ", max_blocks, " blocks");
    const int64_t used = (lens[s] + block_size - 1) / block_size;
    for (int64_t b = 0; b < used; ++b) {
      const int id = tables[s * max_blocks + b];
      TORCH_CHECK(id >= 0 && id < num_blocks, "paged_decode: sequence ", s, " reads block ", id,
                  ", outside the cache's ", num_blocks, " blocks");
    }
  }
}

void check_shapes(const at::Tensor& query, const at::Tensor& k_cache, const at::Tensor& v_cache,
                  const at::Tensor& block_tables, const at::Tensor& seq_lens,
                  const at::Tensor& out, KvType type) {
  TORCH_CHECK(query.dim() == 3 && k_cache.dim() == 4 && block_tables.dim() == 2 &&
                  seq_lens.dim() == 1,
              "paged_decode: expected query [S, H, D], caches [N, B, Hkv, D], block_tables "
              "[S, M] and seq_lens [S]");
  TORCH_CHECK(v_cache.sizes() == k_cache.sizes() && out.sizes() == query.sizes(),
              "paged_decode: v_cache must match k_cache and out must match query");
  TORCH_CHECK(k_cache.size(3) == cache_head_width(query.size(2), type),
              "paged_decode: query and cache head_dim differ");
  TORCH_CHECK(block_tables.size(0) == query.size(0) && seq_lens.size(0) == query.size(0),
              "paged_decode: block_tables and seq_lens need one row per sequence");
  TORCH_CHECK(k_cache.size(2) > 0 && query.size(1) % k_cache.size(2) == 0,
              "paged_decode: ", query.size(1), " query heads are not a multiple of ",
              k_cache.size(2), " KV heads");
}

}  // namespace

void paged_decode(at::Tensor query, at::Tensor k_cache, at::Tensor v_cache,
                  at::Tensor block_tables, at::Tensor seq_lens, double scale,
                  at::Tensor out) {
  TORCH_CHECK(query.dtype() == at::kFloat, "paged_decode: query must be float32");
  TORCH_CHECK(out.dtype() == at::kFloat || out.dtype() == at::kBFloat16,
              "paged_decode: out must be float32 or bfloat16");
  const KvType type = kv_cache_type(k_cache, v_cache, "paged_decode");
  check_rows(query, "paged_decode query");
  TORCH_CHECK(out.is_contiguous() && k_cache.is_contiguous() && v_cache.is_contiguous() &&
                  block_tables.is_contiguous() && seq_lens.is_contiguous(),
              "paged_decode: tensors must be contiguous");
  TORCH_CHECK(block_tables.dtype() == at::kInt && seq_lens.dtype() == at::kInt,
              "paged_decode: block_tables and seq_lens must be int32");
  check_shapes(query, k_cache, v_cache, block_tables, seq_lens, out, type);
  const int64_t head_dim = query.size(2);
  const int64_t group = query.size(1) / k_cache.size(2);
  TORCH_CHECK(paged_decode_supports(head_dim, group), "paged_decode: unsupported head_dim/group");
  TORCH_CHECK(k_cache.size(1) <= kMaxBlock, "paged_decode: block_size above 128");
  check_block_tables(block_tables, seq_lens, k_cache.size(0), k_cache.size(1));
  DecodeFn fn = type == KvType::kBFloat16 ? pick_decode<bf16_bits>(head_dim, group)
                : type == KvType::kInt8    ? pick_decode<int8_t>(head_dim, group)
                                           : pick_decode<float>(head_dim, group);
  fn(query, k_cache, v_cache, block_tables, seq_lens, scale, out);
}
