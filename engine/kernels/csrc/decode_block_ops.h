// The arithmetic paged decode attention does on one KV block for one KV head's G query heads:
// the scores q.k of the block's rows, and the values added in weighted by the softmax.
//
// Two builds of the same contract. Where AVX-512 is compiled in, a block's scores are reduced
// sixteen rows at a time by a transposing tree of shuffles (one horizontal sum per row and head
// cost ~3x the dot product itself), and a bf16 row is widened by interleaving each element under
// a zero half, one instruction per sixteen floats. That widening leaves a row's elements in a
// fixed order other than the row's own, so q and the accumulators are kept in that order too
// (`load_query`) and put back in order only when the output is written (`store_head`); both are
// two permutes per 32 elements. Elsewhere, portable loops that GCC vectorises, in the row's own
// order.
//
// Shared by both: q is G rows of D floats, p is G rows of `p_stride` floats, acc is G rows of D
// floats, all in lane order; a block has n rows, `row_stride` elements apart. An int8 row's scale
// (kv_element.h) multiplies its score once, and its weight once, rather than each element.
#pragma once

#include <cstdint>
#include <type_traits>

#include "bf16.h"
#include "kv_element.h"

// Asks for one row of the next block while this block is worked on: blocks lie anywhere in the
// pool, so the hardware prefetcher, which follows addresses, cannot find the next one itself.
// Keys come into L2 (kToL2), values into L1 (kToL1). A prefill row's context is already in L2
// (the rows before it read it), so only a prefetch into L1 saves it anything: for values that
// made prefill attention ~4 % faster (benchmarks/results/prefetch_level_ab.json), for keys it
// changed nothing measurable, and decode, whose blocks come from memory, ran the same.
enum PrefetchLevel { kToL2 = 2, kToL1 = 3 };  // __builtin_prefetch's locality

template <PrefetchLevel kLevel, typename T>
inline void prefetch_row(const T* row, int elements) {
  const char* bytes = reinterpret_cast<const char*>(row);
  const int64_t size = static_cast<int64_t>(elements) * sizeof(T);
  for (int64_t offset = 0; offset < size; offset += 64)
    __builtin_prefetch(bytes + offset, 0, kLevel);
}

#if defined(__AVX512F__) && defined(__AVX512BW__)
#include <immintrin.h>

#define PAGEDOCK_DECODE_AVX512 1

namespace decode_avx512 {

// A row of D elements as D / 16 float32 vectors.
template <int D, typename T>
struct Row;

template <int D>
struct Row<D, float> {
  static constexpr int kVectors = D / 16;
  static void load(const float* row, __m512* v) {
    for (int c = 0; c < kVectors; ++c) v[c] = _mm512_loadu_ps(row + 16 * c);
  }
};

template <int D>
struct Row<D, bf16_bits> {
  static constexpr int kVectors = D / 16;
  // Unpacking 32 elements puts, in each 128-bit lane L, elements 8L..8L+3 in the low vector and
  // 8L+4..8L+7 in the high one. A 16-element row is widened in order instead.
  static void load(const bf16_bits* row, __m512* v) {
    if constexpr (D == 16) {
      const __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row));
      v[0] = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(bits), 16));
      return;
    }
    const __m512i zero = _mm512_setzero_si512();
    for (int c = 0; c < kVectors / 2; ++c) {
      const __m512i bits = _mm512_loadu_si512(row + 32 * c);
      v[2 * c] = _mm512_castsi512_ps(_mm512_unpacklo_epi16(zero, bits));
      v[2 * c + 1] = _mm512_castsi512_ps(_mm512_unpackhi_epi16(zero, bits));
    }
  }
};

template <int D>
struct Row<D, int8_t> {
  static constexpr int kVectors = D / 16;
  static void load(const int8_t* row, __m512* v) {
    for (int c = 0; c < kVectors; ++c) {
      const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 16 * c));
      v[c] = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(bytes));
    }
  }
};

// Four rows' products -> one vector whose 128-bit lane L holds, in order, the four rows' partial
// sums over lane L.
inline __m512 reduce4(__m512 a, __m512 b, __m512 c, __m512 d) {
  const __m512 ab = _mm512_add_ps(_mm512_unpacklo_ps(a, b), _mm512_unpackhi_ps(a, b));
  const __m512d abd = _mm512_castps_pd(ab);
  const __m512 cd = _mm512_add_ps(_mm512_unpacklo_ps(c, d), _mm512_unpackhi_ps(c, d));
  const __m512d cdd = _mm512_castps_pd(cd);
  // The pairs move as 64-bit units but are added as the floats they are.
  return _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(abd, cdd)),
                       _mm512_castpd_ps(_mm512_unpackhi_pd(abd, cdd)));
}

// Four reduce4 results -> sixteen row sums, row r in lane r.
inline __m512 reduce16(__m512 w0, __m512 w1, __m512 w2, __m512 w3) {
  constexpr int kEven = _MM_SHUFFLE(2, 0, 2, 0), kOdd = _MM_SHUFFLE(3, 1, 3, 1);
  const __m512 x = _mm512_add_ps(_mm512_shuffle_f32x4(w0, w1, kEven),
                                 _mm512_shuffle_f32x4(w0, w1, kOdd));
  const __m512 y = _mm512_add_ps(_mm512_shuffle_f32x4(w2, w3, kEven),
                                 _mm512_shuffle_f32x4(w2, w3, kOdd));
  return _mm512_add_ps(_mm512_shuffle_f32x4(x, y, kEven), _mm512_shuffle_f32x4(x, y, kOdd));
}

// The G heads' products with four rows starting at t (rows past n count as zero), reduced to one
// reduce4 vector per head.
template <int D, int G, typename T>
inline void score_quad(const __m512 (&q)[G][D / 16], const T* keys, const T* next_keys,
                       int64_t row_stride, int t, int n, __m512 (&quad)[G]) {
  constexpr int V = D / 16;
  __m512 dots[4][G];
  for (int r = 0; r < 4; ++r) {
    if (t + r >= n) {
      for (int g = 0; g < G; ++g) dots[r][g] = _mm512_setzero_ps();
      continue;
    }
    prefetch_row<kToL2>(next_keys + (t + r) * row_stride, kHeadWidth<T, D>);
    __m512 key[V];
    Row<D, T>::load(keys + (t + r) * row_stride, key);
    for (int g = 0; g < G; ++g) {
      __m512 sum = _mm512_mul_ps(q[g][0], key[0]);
      for (int c = 1; c < V; ++c) sum = _mm512_fmadd_ps(q[g][c], key[c], sum);
      dots[r][g] = sum;
    }
  }
  for (int g = 0; g < G; ++g) quad[g] = reduce4(dots[0][g], dots[1][g], dots[2][g], dots[3][g]);
}

// Where each lane of a widened bf16 pair (32 elements, two vectors) takes its element from, as
// indices into the pair read in order (`_mm512_permutex2var_ps`: 16 and up pick the second
// vector), as Row<D, bf16_bits>::load leaves them; and the way back from the two widened vectors.
alignas(64) constexpr int kToLanesFirst[16] = {
    0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27};
alignas(64) constexpr int kToLanesSecond[16] = {
    4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31};
alignas(64) constexpr int kToOrderFirst[16] = {
    0, 1, 2, 3, 16, 17, 18, 19, 4, 5, 6, 7, 20, 21, 22, 23};
alignas(64) constexpr int kToOrderSecond[16] = {
    8, 9, 10, 11, 24, 25, 26, 27, 12, 13, 14, 15, 28, 29, 30, 31};

// Whether a row of D elements of T is widened out of its own order (bf16 rows of 32 and more).
template <int D, typename T>
constexpr bool kPairsShuffled = std::is_same_v<T, bf16_bits> && D >= 32;

// Two vectors of 16 consecutive elements -> the same elements in the order `index` names.
inline __m512 permute_pair(__m512 first, __m512 second, const int* index) {
  return _mm512_permutex2var_ps(first, _mm512_load_si512(index), second);
}

// round_bf16 (bf16.h) on sixteen floats at once, bit for bit.
inline __m256i round_bf16_x16(__m512 f) {
  const __m512i bits = _mm512_castps_si512(f);
  const __m512i high = _mm512_srli_epi32(bits, 16);
  const __m512i odd = _mm512_and_si512(high, _mm512_set1_epi32(1));
  const __m512i sum = _mm512_add_epi32(_mm512_add_epi32(bits, _mm512_set1_epi32(0x7fff)), odd);
  const __m512i magnitude = _mm512_and_si512(bits, _mm512_set1_epi32(0x7fffffff));
  const __mmask16 nan = _mm512_cmpgt_epu32_mask(magnitude, _mm512_set1_epi32(0x7f800000));
  const __m512i quiet = _mm512_or_si512(high, _mm512_set1_epi32(0x40));
  return _mm512_cvtepi32_epi16(_mm512_mask_blend_epi32(nan, _mm512_srli_epi32(sum, 16), quiet));
}

inline void store16(float* out, __m512 v) { _mm512_storeu_ps(out, v); }
inline void store16(bf16_bits* out, __m512 v) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), round_bf16_x16(v));
}

}  // namespace decode_avx512

// A query head's row, times `scale`, into the lane order the keys are widened in.
template <int D, typename T>
inline void load_query(const float* row, float scale, float* lanes) {
  using namespace decode_avx512;
  const __m512 s = _mm512_set1_ps(scale);
  for (int c = 0; c < D / 16; c += kPairsShuffled<D, T> ? 2 : 1) {
    const __m512 first = _mm512_loadu_ps(row + 16 * c);
    if constexpr (kPairsShuffled<D, T>) {
      const __m512 second = _mm512_loadu_ps(row + 16 * c + 16);
      _mm512_storeu_ps(lanes + 16 * c,
                       _mm512_mul_ps(permute_pair(first, second, kToLanesFirst), s));
      _mm512_storeu_ps(lanes + 16 * c + 16,
                       _mm512_mul_ps(permute_pair(first, second, kToLanesSecond), s));
    } else {
      _mm512_storeu_ps(lanes + 16 * c, _mm512_mul_ps(first, s));
    }
  }
}

// An accumulator row in lane order, times `inv`, back into element order as float32 or bf16.
template <int D, typename T, typename O>
inline void store_head(const float* lanes, float inv, O* out) {
  using namespace decode_avx512;
  const __m512 s = _mm512_set1_ps(inv);
  for (int c = 0; c < D / 16; c += kPairsShuffled<D, T> ? 2 : 1) {
    const __m512 first = _mm512_mul_ps(_mm512_loadu_ps(lanes + 16 * c), s);
    if constexpr (kPairsShuffled<D, T>) {
      const __m512 second = _mm512_mul_ps(_mm512_loadu_ps(lanes + 16 * c + 16), s);
      store16(out + 16 * c, permute_pair(first, second, kToOrderFirst));
      store16(out + 16 * c + 16, permute_pair(first, second, kToOrderSecond));
    } else {
      store16(out + 16 * c, first);
    }
  }
}

template <int D, int G, typename T>
inline void score_block(const float* q_rows, float* p, int p_stride, const T* keys,
                        const T* next_keys, int64_t row_stride, int n) {
  using namespace decode_avx512;
  constexpr int V = D / 16;
  __m512 q[G][V];
  for (int g = 0; g < G; ++g)
    for (int c = 0; c < V; ++c) q[g][c] = _mm512_loadu_ps(q_rows + g * D + 16 * c);
  for (int t0 = 0; t0 < n; t0 += 16) {
    __m512 quads[4][G];
    for (int j = 0; j < 4; ++j) {
      if (t0 + 4 * j < n) {
        score_quad<D, G, T>(q, keys, next_keys, row_stride, t0 + 4 * j, n, quads[j]);
      } else {
        for (int g = 0; g < G; ++g) quads[j][g] = _mm512_setzero_ps();
      }
    }
    const int rows = n - t0 < 16 ? n - t0 : 16;
    const __mmask16 valid = static_cast<__mmask16>((1u << rows) - 1u);
    alignas(64) float scales[16];
    if constexpr (kScaledRows<T>) {
      for (int r = 0; r < 16; ++r)
        scales[r] = r < rows ? row_scale<T, D>(keys + (t0 + r) * row_stride) : 0.f;
    }
    for (int g = 0; g < G; ++g) {
      __m512 scores = reduce16(quads[0][g], quads[1][g], quads[2][g], quads[3][g]);
      if constexpr (kScaledRows<T>) scores = _mm512_mul_ps(scores, _mm512_load_ps(scales));
      _mm512_mask_storeu_ps(p + g * p_stride + t0, valid, scores);
    }
  }
}

template <int D, int G, typename T>
inline void accumulate_block(float* acc_rows, const float* p, int p_stride, const T* values,
                             const T* next_values, int64_t row_stride, int n) {
  using decode_avx512::Row;
  constexpr int V = D / 16;
  __m512 acc[G][V];
  for (int g = 0; g < G; ++g)
    for (int c = 0; c < V; ++c) acc[g][c] = _mm512_loadu_ps(acc_rows + g * D + 16 * c);
  for (int t = 0; t < n; ++t) {
    prefetch_row<kToL1>(next_values + t * row_stride, kHeadWidth<T, D>);
    __m512 value[V];
    Row<D, T>::load(values + t * row_stride, value);
    const float value_scale = row_scale<T, D>(values + t * row_stride);
    for (int g = 0; g < G; ++g) {
      const __m512 weight = _mm512_set1_ps(p[g * p_stride + t] * value_scale);
      for (int c = 0; c < V; ++c) acc[g][c] = _mm512_fmadd_ps(weight, value[c], acc[g][c]);
    }
  }
  for (int g = 0; g < G; ++g)
    for (int c = 0; c < V; ++c) _mm512_storeu_ps(acc_rows + g * D + 16 * c, acc[g][c]);
}

#else  // portable loops, elements in the row's own order

template <int D, typename T>
inline void load_query(const float* row, float scale, float* lanes) {
#pragma omp simd
  for (int i = 0; i < D; ++i) lanes[i] = row[i] * scale;
}

template <int D, typename T, typename O>
inline void store_head(const float* lanes, float inv, O* out) {
  for (int i = 0; i < D; ++i) out[i] = from_float<O>(lanes[i] * inv);
}

// Row t of a block as float32, after asking for the same row of the next block.
template <int D, PrefetchLevel kLevel, typename T>
inline void widen_row(const T* rows, const T* next_rows, int64_t row_stride, int t,
                      float* __restrict out) {
  prefetch_row<kLevel>(next_rows + t * row_stride, kHeadWidth<T, D>);
  const T* row = rows + t * row_stride;
#pragma omp simd
  for (int i = 0; i < D; ++i) out[i] = to_float(row[i]);
}

template <int D, int G, typename T>
inline void score_block(const float* q_rows, float* p, int p_stride, const T* keys,
                        const T* next_keys, int64_t row_stride, int n) {
  for (int t = 0; t < n; ++t) {
    alignas(64) float key[D];
    widen_row<D, kToL2>(keys, next_keys, row_stride, t, key);
    for (int g = 0; g < G; ++g) {
      const float* q = q_rows + g * D;
      float sum = 0.f;
#pragma omp simd reduction(+ : sum)
      for (int i = 0; i < D; ++i) sum += q[i] * key[i];
      p[g * p_stride + t] = sum * row_scale<T, D>(keys + t * row_stride);
    }
  }
}

// The G accumulators stay in registers for the whole block instead of being loaded and stored
// for every row.
template <int D, int G, typename T>
inline void accumulate_block(float* acc_rows, const float* p, int p_stride, const T* values,
                             const T* next_values, int64_t row_stride, int n) {
  alignas(64) float acc[G][D];
  for (int g = 0; g < G; ++g)
#pragma omp simd
    for (int i = 0; i < D; ++i) acc[g][i] = acc_rows[g * D + i];
  for (int t = 0; t < n; ++t) {
    alignas(64) float value[D];
    widen_row<D, kToL1>(values, next_values, row_stride, t, value);
    const float value_scale = row_scale<T, D>(values + t * row_stride);
    for (int g = 0; g < G; ++g) {
      const float weight = p[g * p_stride + t] * value_scale;
#pragma omp simd
      for (int i = 0; i < D; ++i) acc[g][i] += weight * value[i];
    }
  }
  for (int g = 0; g < G; ++g)
#pragma omp simd
    for (int i = 0; i < D; ++i) acc_rows[g * D + i] = acc[g][i];
}

#endif
