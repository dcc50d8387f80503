// The C++ CPU kernels' entry points, bound into one Python module by bindings.cpp.
#pragma once

#include <ATen/core/Tensor.h>

#include <tuple>

// paged_decode_cpu.cpp
bool paged_decode_supports(int64_t head_dim, int64_t group);
void paged_decode(at::Tensor query, at::Tensor k_cache, at::Tensor v_cache,
                  at::Tensor block_tables, at::Tensor seq_lens, double scale,
                  at::Tensor out);

// kv_cache_write_cpu.cpp
void write_kv_cache(at::Tensor key, at::Tensor value, at::Tensor k_cache,
                    at::Tensor v_cache, at::Tensor slot_mapping);

// rotary_cpu.cpp
void rotary_embedding_(at::Tensor query, at::Tensor key, at::Tensor cos,
                       at::Tensor sin);

// rms_norm_cpu.cpp
at::Tensor rms_norm(at::Tensor x, at::Tensor weight, double eps);
void fused_add_rms_norm_(at::Tensor x, at::Tensor residual, at::Tensor weight,
                         double eps);

// silu_and_mul_cpu.cpp
at::Tensor silu_and_mul(at::Tensor gate_up);

// quantize_rows_cpu.cpp
std::tuple<at::Tensor, at::Tensor> quantize_rows_u8(at::Tensor x);
