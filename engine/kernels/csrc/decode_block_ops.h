// The arithmetic paged decode attention does on one KV block for one KV head's G query heads:
// the scores q.k of the block's rows, and the values added in weighted by the softmax.
//
// Two builds of the same contract. Where AVX-512 is compiled in, a block's scores are reduced
// sixteen rows at a time by a transposing tree of shuffles (one horizontal sum per row and head
// cost ~3x the dot product itself), and a bf16 row is widened by interleaving each element under
// a zero half, one instruction per sixteen floats. That widening leaves a row's elements in a
// fixed order other than the row's own, so q and the accumulators are kept in that order too
// (`lane_element`) and put back in order only when the output is written. Elsewhere, portable
// loops that GCC vectorises, in the row's own order.
//
// Shared by both: q is G rows of D floats, p is G rows of `p_stride` floats, acc is G rows of D
// floats, all in lane order; a block has n rows, `row_stride` elements apart. An int8 row's scale
// (kv_element.h) multiplies its score once, and its weight once, rather than each element.
#pragma once

#include <cstdint>

#include "bf16.h"
#include "kv_element.h"

// Asks for one row of the next block while this block is worked on: blocks lie anywhere in the
// pool, so the hardware prefetcher, which follows addresses, cannot find the next one itself.
template <typename T>
inline void prefetch_row(const T* row, int elements) {
  const char* bytes = reinterpret_cast<const char*>(row);
  const int64_t size = static_cast<int64_t>(elements) * sizeof(T);
  for (int64_t offset = 0; offset < size; offset += 64) __builtin_prefetch(bytes + offset, 0, 2);
}

#if defined(__AVX512F__) && defined(__AVX512BW__)
#include <immintrin.h>

#define PAGEDOCK_DECODE_AVX512 1

namespace decode_avx512 {

// A row of D elements as D / 16 float32 vectors, and which element each lane holds.
template <int D, typename T>
struct Row;

template <int D>
struct Row<D, float> {
  static constexpr int kVectors = D / 16;
  static int element(int i) { return i; }
  static void load(const float* row, __m512* v) {
    for (int c = 0; c < kVectors; ++c) v[c] = _mm512_loadu_ps(row + 16 * c);
  }
};

template <int D>
struct Row<D, bf16_bits> {
  static constexpr int kVectors = D / 16;
  // Unpacking 32 elements puts, in each 128-bit lane L, elements 8L..8L+3 in the low vector and
  // 8L+4..8L+7 in the high one. A 16-element row is widened in order instead.
  static int element(int i) {
    if (D == 16) return i;
    const int c = i / 16, lane = i % 16;
    return 32 * (c / 2) + 8 * (lane / 4) + 4 * (c % 2) + lane % 4;
  }
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
  static int element(int i) { return i; }
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
    prefetch_row(next_keys + (t + r) * row_stride, kHeadWidth<T, D>);
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

}  // namespace decode_avx512

template <int D, typename T>
inline int lane_element(int i) {
  return decode_avx512::Row<D, T>::element(i);
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
    prefetch_row(next_values + t * row_stride, kHeadWidth<T, D>);
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
inline int lane_element(int i) {
  return i;
}

// Row t of a block as float32, after asking for the same row of the next block.
template <int D, typename T>
inline void widen_row(const T* rows, const T* next_rows, int64_t row_stride, int t,
                      float* __restrict out) {
  prefetch_row(next_rows + t * row_stride, kHeadWidth<T, D>);
  const T* row = rows + t * row_stride;
#pragma omp simd
  for (int i = 0; i < D; ++i) out[i] = to_float(row[i]);
}

template <int D, int G, typename T>
inline void score_block(const float* q_rows, float* p, int p_stride, const T* keys,
                        const T* next_keys, int64_t row_stride, int n) {
  for (int t = 0; t < n; ++t) {
    alignas(64) float key[D];
    widen_row<D, T>(keys, next_keys, row_stride, t, key);
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
    widen_row<D, T>(values, next_values, row_stride, t, value);
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
