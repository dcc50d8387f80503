"""The C++ CPU kernels against their torch references."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from engine.attention import torch_attention
from engine.attention.torch_attention import (
    paged_decode_attention,
    write_kv_cache,
)
from engine.kernels.cpu_kernels import load_cpu_kernels
from engine.layers.norm import rms_norm_reference
from engine.layers.rotary import rotate_reference
from tests.engine.attention_factories import attention_metadata, forward_both_backends, mixed_step

kernels = load_cpu_kernels()
pytestmark = pytest.mark.skipif(kernels is None, reason="no C++ toolchain to build the kernels")


def random_paged_cache(seq_lens: list[int], block_size: int, num_kv_heads: int, head_dim: int):
    needed = [-(-n // block_size) for n in seq_lens]
    num_blocks = sum(needed) + 3
    k_cache = torch.randn(num_blocks, block_size, num_kv_heads, head_dim)
    v_cache = torch.randn(num_blocks, block_size, num_kv_heads, head_dim)
    # Shuffled, non-contiguous physical blocks, padded with 0.
    perm = torch.randperm(num_blocks).to(torch.int32)
    tables = torch.zeros(len(seq_lens), max(needed) + 1, dtype=torch.int32)
    start = 0
    for row, n in enumerate(needed):
        tables[row, :n] = perm[start : start + n]
        start += n
    return k_cache, v_cache, tables


@pytest.mark.parametrize("head_dim", [16, 32, 64, 128])
@pytest.mark.parametrize("group", [1, 3, 4, 8])
@pytest.mark.parametrize("block_size", [8, 16, 32, 128])
def test_paged_decode_matches_the_torch_reference(
    head_dim: int, group: int, block_size: int
) -> None:
    torch.manual_seed(head_dim * group + block_size)
    seq_lens = [1, 17, 5, 64, 33, 150]
    num_kv_heads = 2
    k_cache, v_cache, tables = random_paged_cache(seq_lens, block_size, num_kv_heads, head_dim)
    query = torch.randn(len(seq_lens), num_kv_heads * group, head_dim)
    lens = torch.tensor(seq_lens, dtype=torch.int32)
    scale = head_dim**-0.5
    expected = paged_decode_attention(query, k_cache, v_cache, tables, lens, max(seq_lens), scale)
    out = torch.full_like(query, float("nan"))  # poisoned: an unwritten element fails
    assert kernels is not None
    kernels.paged_decode(query, k_cache, v_cache, tables, lens, scale, out)
    torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-5)


def test_unsupported_shapes_are_reported_not_computed() -> None:
    assert kernels is not None
    assert not kernels.supports(96, 3)
    assert not kernels.supports(64, 9)


def test_decode_reads_a_strided_query_in_place() -> None:
    # The query is a view into the fused QKV projection: rows strided, heads contiguous.
    torch.manual_seed(1)
    seq_lens = [3, 40, 17]
    k_cache, v_cache, tables = random_paged_cache(seq_lens, 16, 2, 64)
    qkv = torch.randn(len(seq_lens), (6 + 2 + 2) * 64)
    query = qkv[:, : 6 * 64].view(len(seq_lens), 6, 64)
    lens = torch.tensor(seq_lens, dtype=torch.int32)
    expected = paged_decode_attention(
        query.contiguous(), k_cache, v_cache, tables, lens, max(seq_lens), 0.125
    )
    out = torch.full((len(seq_lens), 6, 64), float("nan"))
    assert kernels is not None
    kernels.paged_decode(query, k_cache, v_cache, tables, lens, 0.125, out)
    torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("num_seqs", [1, 2, 64])
def test_decode_splits_heads_when_sequences_are_few(num_seqs: int) -> None:
    # One sequence with 8 KV heads is cut into per-head items; 64 are one item each.
    torch.manual_seed(num_seqs)
    seq_lens = [5 + 7 * i for i in range(num_seqs)]
    k_cache, v_cache, tables = random_paged_cache(seq_lens, 16, 8, 32)
    query = torch.randn(num_seqs, 8 * 2, 32)
    lens = torch.tensor(seq_lens, dtype=torch.int32)
    expected = paged_decode_attention(query, k_cache, v_cache, tables, lens, max(seq_lens), 0.2)
    out = torch.full_like(query, float("nan"))
    assert kernels is not None
    kernels.paged_decode(query, k_cache, v_cache, tables, lens, 0.2, out)
    torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-5)


def test_kv_cache_write_matches_index_copy_and_skips_padding_slots() -> None:
    torch.manual_seed(2)
    qkv = torch.randn(5, (4 + 2 + 2) * 32)
    key = qkv[:, 4 * 32 : 6 * 32].view(5, 2, 32)
    value = qkv[:, 6 * 32 :].view(5, 2, 32)
    slots = torch.tensor([7, 0, -1, 33, 12])
    k_cache, v_cache = torch.zeros(4, 16, 2, 32), torch.zeros(4, 16, 2, 32)
    expected_k, expected_v = k_cache.clone(), v_cache.clone()
    keep = slots >= 0
    write_kv_cache(key[keep], value[keep], expected_k, expected_v, slots[keep])
    assert kernels is not None
    kernels.write_kv_cache(key, value, k_cache, v_cache, slots)
    assert torch.equal(k_cache, expected_k) and torch.equal(v_cache, expected_v)


def test_kv_cache_write_rejects_a_slot_beyond_the_cache() -> None:
    k_cache, v_cache = torch.zeros(2, 16, 1, 16), torch.zeros(2, 16, 1, 16)
    key = torch.randn(1, 1, 16)
    assert kernels is not None
    with pytest.raises(RuntimeError, match="out of range"):
        kernels.write_kv_cache(key, key, k_cache, v_cache, torch.tensor([32]))


def test_rotary_rotates_strided_q_and_k_in_place_like_the_torch_expression() -> None:
    torch.manual_seed(3)
    tokens, heads, kv_heads, dim = 7, 4, 2, 64
    qkv = torch.randn(tokens, (heads + 2 * kv_heads) * dim)
    q = qkv[:, : heads * dim].view(tokens, heads, dim)
    k = qkv[:, heads * dim : (heads + kv_heads) * dim].view(tokens, kv_heads, dim)
    cos, sin = torch.randn(tokens, 1, dim // 2), torch.randn(tokens, 1, dim // 2)
    expected_q, expected_k = (
        rotate_reference(q.clone(), cos, sin),
        rotate_reference(k.clone(), cos, sin),
    )
    v_before = qkv[:, (heads + kv_heads) * dim :].clone()
    assert kernels is not None
    kernels.rotary_embedding_(q, k, cos, sin)
    torch.testing.assert_close(q, expected_q, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(k, expected_k, rtol=1e-5, atol=1e-6)
    assert torch.equal(qkv[:, (heads + kv_heads) * dim :], v_before)  # V untouched


@pytest.mark.parametrize("rows", [0, 1, 3, 300])
def test_rms_norm_and_fused_add_match_torch(rows: int) -> None:
    torch.manual_seed(rows)
    x, residual, weight = torch.randn(rows, 576), torch.randn(rows, 576), torch.randn(576)
    assert kernels is not None
    torch.testing.assert_close(
        kernels.rms_norm(x, weight, 1e-5), rms_norm_reference(x, weight, 1e-5)
    )
    expected_residual = residual + x
    expected = rms_norm_reference(expected_residual, weight, 1e-5)
    kernels.fused_add_rms_norm_(x, residual, weight, 1e-5)
    torch.testing.assert_close(residual, expected_residual)
    torch.testing.assert_close(x, expected)


@pytest.mark.parametrize("rows", [0, 2, 257])
def test_silu_and_mul_matches_torch(rows: int) -> None:
    torch.manual_seed(rows)
    gate_up = torch.randn(rows, 2 * 1536) * 4
    gate, up = gate_up.chunk(2, dim=-1)
    assert kernels is not None
    torch.testing.assert_close(
        kernels.silu_and_mul(gate_up), F.silu(gate) * up, rtol=1e-5, atol=1e-5
    )


@pytest.mark.parametrize("rows", [1, 64, 300])
def test_a_bf16_gemm_product_is_added_to_the_float32_residual_and_normalised_back_into_bf16(
    rows: int,
) -> None:
    torch.manual_seed(rows)
    product = torch.randn(rows, 576).to(torch.bfloat16)
    residual, weight = torch.randn(rows, 576), torch.randn(576)
    expected_residual = residual + product.float()
    # What the unfused path computed: a float32 norm, then the next GEMM's cast to bf16.
    expected = rms_norm_reference(expected_residual, weight, 1e-5).to(torch.bfloat16)
    assert kernels is not None
    kernels.fused_add_rms_norm_(product, residual, weight, 1e-5)
    assert product.dtype == torch.bfloat16 and residual.dtype == torch.float32
    torch.testing.assert_close(residual, expected_residual)
    # float32 sums in another order may round a rare element to the neighbouring bf16 value.
    torch.testing.assert_close(product.float(), expected.float(), rtol=2**-7, atol=1e-5)
    assert (product == expected).float().mean() > 0.99


@pytest.mark.parametrize("rows", [1, 64, 300])
def test_silu_and_mul_of_a_bf16_product_computes_in_float32_and_rounds_once(rows: int) -> None:
    torch.manual_seed(rows)
    gate_up = (torch.randn(rows, 2 * 1536) * 4).to(torch.bfloat16)
    gate, up = gate_up.float().chunk(2, dim=-1)
    expected = (F.silu(gate) * up).to(torch.bfloat16)
    assert kernels is not None
    out = kernels.silu_and_mul(gate_up)
    assert out.dtype == torch.bfloat16 and out.shape == expected.shape
    torch.testing.assert_close(out.float(), expected.float(), rtol=2**-7, atol=1e-5)
    assert (out == expected).float().mean() > 0.99


def test_row_kernels_refuse_tensors_they_cannot_read() -> None:
    assert kernels is not None
    with pytest.raises(RuntimeError, match="float32 or bfloat16"):
        kernels.silu_and_mul(torch.randn(2, 8, dtype=torch.float64))
    with pytest.raises(RuntimeError, match="float32 CPU tensor"):  # the residual stays float32
        kernels.fused_add_rms_norm_(
            torch.randn(2, 8), torch.randn(2, 8, dtype=torch.bfloat16), torch.ones(8), 1e-5
        )
    with pytest.raises(RuntimeError, match="contiguous"):
        kernels.rms_norm(torch.randn(8, 4).t(), torch.ones(8), 1e-5)
    with pytest.raises(RuntimeError, match="weight"):
        kernels.rms_norm(torch.randn(2, 8), torch.ones(7), 1e-5)


@pytest.mark.parametrize("per_row_max_context", [2048, 20])
def test_cpu_backend_matches_the_reference_on_a_mixed_step(
    per_row_max_context: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Decodes, a fresh prompt, a chunk over a cached prefix, a long chunk: every row through
    # the per-row kernel, or (limit 20) the chunk of 37 through SDPA beside it.
    monkeypatch.setattr(torch_attention, "PER_ROW_PREFILL_MAX_CONTEXT", per_row_max_context)
    step = mixed_step()
    out, expected = forward_both_backends(step, step.k_cache, step.v_cache)
    long_prefills = torch_attention.per_token_context(step.meta)[2]
    assert long_prefills == ([] if per_row_max_context == 2048 else [5])
    torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-5)


def test_a_verification_pass_at_a_long_context_goes_through_the_per_row_kernel() -> None:
    # A decode, a speculative verification pass (five rows) and a 40-token chunk, all of
    # 3,000-token contexts: the pass's rows go through the per-row kernel as a decode's would
    # (the same bits), only the chunk through SDPA.
    meta, _ = attention_metadata([1, 5, 40], [3000, 3000, 3000], 16, torch.Generator())
    _, lens, long_prefills = torch_attention.per_token_context(meta)
    assert long_prefills == [2]
    assert lens[:6].tolist() == [3000, 2996, 2997, 2998, 2999, 3000]
    assert not lens[6:].any()
