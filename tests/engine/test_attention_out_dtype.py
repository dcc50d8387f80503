"""Attention written in the next GEMM's dtype (AttentionBackend.forward's `out_dtype`).

Specification: asked for bf16, the CPU backend returns exactly its float32 output rounded once to
bf16 (nearest, ties to even: what `.to(torch.bfloat16)` does), whether a row went through the C++
kernel, which writes bf16 itself, or through SDPA; so o_proj's input is the same bit for bit as
when it cast the float32 output. Without `out_dtype` the output is the query's dtype."""

from __future__ import annotations

import pytest
import torch

from engine.attention import torch_attention
from engine.attention.torch_attention import TorchAttentionBackend
from engine.kernels.cpu_kernels import load_cpu_kernels
from engine.layers.cpu_linear import PackedLinear, bf16_packing_available, gemm_input_dtype
from tests.engine.attention_factories import mixed_step
from tests.engine.test_cpu_kernels import random_paged_cache
from tests.engine.test_kv_cache_bf16 import bf16

kernels = load_cpu_kernels()


def kernel_outputs(
    query: torch.Tensor, lens: list[int], head_dim: int, kv_dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """The kernel's float32 and bf16 outputs for `query` over a random cache of `kv_dtype`
    (sequences of `lens` tokens, 2 KV heads, blocks of 16)."""
    k_cache, v_cache, tables = random_paged_cache(lens, 16, 2, head_dim)
    k_cache, v_cache = k_cache.to(kv_dtype), v_cache.to(kv_dtype)
    seq_lens = torch.tensor(lens, dtype=torch.int32)
    out32 = torch.empty_like(query)
    out16 = torch.empty(query.shape, dtype=torch.bfloat16)
    assert kernels is not None
    kernels.paged_decode(query, k_cache, v_cache, tables, seq_lens, 0.125, out32)
    kernels.paged_decode(query, k_cache, v_cache, tables, seq_lens, 0.125, out16)
    return out32, out16


@pytest.mark.skipif(kernels is None, reason="no C++ toolchain to build the kernels")
@pytest.mark.parametrize("head_dim", [16, 32, 64, 128])
@pytest.mark.parametrize("kv_dtype", [torch.float32, torch.bfloat16])
def test_the_kernel_writes_bf16_as_its_float32_output_rounded(
    kv_dtype: torch.dtype, head_dim: int
) -> None:
    # (A bf16 cache's rows are widened out of order at head_dim >= 32: the query goes in and the
    # output comes out through that order's permutes.)
    out32, out16 = kernel_outputs(torch.randn(4, 6, head_dim), [1, 17, 64, 150], head_dim, kv_dtype)
    assert torch.equal(out16, out32.to(torch.bfloat16))


@pytest.mark.skipif(kernels is None, reason="no C++ toolchain to build the kernels")
def test_a_nan_in_a_query_stays_nan_in_bf16_and_touches_no_other_row() -> None:
    query = torch.randn(2, 6, 64)
    query[0, 2, 7] = float("nan")
    out32, out16 = kernel_outputs(query, [5, 40], 64, torch.bfloat16)
    assert torch.isnan(out16[0, 2]).all() and not torch.isinf(out16).any()
    assert torch.equal(out16[1], out32[1].to(torch.bfloat16))


@pytest.mark.parametrize("use_cpu_kernels", [True, False])
@pytest.mark.parametrize("per_row_max_context", [2048, 1])
def test_the_backend_returns_bf16_as_asked_and_rounded_once(
    use_cpu_kernels: bool, per_row_max_context: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(torch_attention, "PER_ROW_PREFILL_MAX_CONTEXT", per_row_max_context)
    backend = TorchAttentionBackend(use_cpu_kernels=use_cpu_kernels)
    step = mixed_step()
    args = (step.query, step.key, step.value, *bf16(step.k_cache, step.v_cache), step.meta, 0.125)
    as_float = backend.forward(*args)
    as_bf16 = backend.forward(*args, torch.bfloat16)
    assert as_float.dtype == torch.float32 and as_bf16.dtype == torch.bfloat16
    assert torch.equal(as_bf16, as_float.to(torch.bfloat16))


@pytest.mark.skipif(kernels is None, reason="no C++ toolchain to build the kernels")
def test_a_bad_out_dtype_is_refused_by_the_kernel() -> None:
    k_cache, v_cache, tables = random_paged_cache([5], 16, 2, 64)
    query = torch.randn(1, 6, 64)
    out = torch.empty(query.shape, dtype=torch.float16)
    assert kernels is not None
    with pytest.raises(RuntimeError, match="out must be float32 or bfloat16"):
        kernels.paged_decode(
            query, k_cache, v_cache, tables, torch.tensor([5], dtype=torch.int32), 0.125, out
        )


@pytest.mark.skipif(not bf16_packing_available(), reason="this CPU can't pack bf16 weights")
def test_a_packed_layer_names_the_dtype_it_multiplies_in() -> None:
    linear = torch.nn.Linear(8, 4)
    assert gemm_input_dtype(PackedLinear(linear, torch.bfloat16)) == torch.bfloat16
    assert gemm_input_dtype(linear) is None
