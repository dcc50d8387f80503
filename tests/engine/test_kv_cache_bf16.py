"""A bf16 KV cache under float32 activations (EngineConfig.kv_cache_dtype="bfloat16", CPU).

Specification: K and V are rounded to bf16 (nearest, ties to even) when written; attention reads
them back widened to float32 and computes in float32. So against a float32 reference fed the
same bf16-rounded K/V the C++ kernels agree as tightly as the float32 kernels do (rtol 1e-4,
atol 1e-5), and against the unrounded float32 K/V within bf16's precision: each element is off
by at most 2**-9 of itself, which over unit-scale random K/V moves an attention output by well
under LOOSE_ATOL."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

from engine.attention import torch_attention
from engine.attention.torch_attention import TorchAttentionBackend, paged_decode_attention
from engine.kernels.cpu_kernels import load_cpu_kernels
from tests.engine.attention_factories import attention_metadata, forward_both_backends, mixed_step
from tests.engine.test_cpu_kernels import random_paged_cache

kernels = load_cpu_kernels()
pytestmark = pytest.mark.skipif(kernels is None, reason="no C++ toolchain to build the kernels")

TIGHT = {"rtol": 1e-4, "atol": 1e-5}
LOOSE_ATOL = 3e-2  # bf16 K/V against unrounded float32 K/V, unit-scale random data
LOOSE = {"rtol": 0.0, "atol": LOOSE_ATOL}


def bf16(*tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
    return tuple(t.to(torch.bfloat16) for t in tensors)


@pytest.mark.parametrize("head_dim", [16, 32, 64, 128])
@pytest.mark.parametrize("group", [1, 3, 8])
@pytest.mark.parametrize("block_size", [16, 32])
def test_decode_over_a_bf16_cache_matches_float32_attention_over_the_rounded_kv(
    head_dim: int, group: int, block_size: int
) -> None:
    check_decode_over_a_narrow_cache(
        lambda x: x.to(torch.bfloat16), lambda c: c.float(), head_dim, group, block_size, LOOSE
    )


def check_decode_over_a_narrow_cache(
    narrow: Callable[[torch.Tensor], torch.Tensor],
    widen: Callable[[torch.Tensor], torch.Tensor],
    head_dim: int,
    group: int,
    block_size: int,
    loose: dict[str, float],
) -> None:
    """The C++ kernel over a cache stored by `narrow` agrees tightly with float32 attention over
    the values the cache holds (`widen`), within `loose` with the values before they were stored,
    and the pure-torch path reads the narrow cache (gather, widen) to the same result."""
    torch.manual_seed(head_dim + group + block_size)
    seq_lens = [1, 17, 5, 64, 33, 350]
    k32, v32, tables = random_paged_cache(seq_lens, block_size, 3, head_dim)
    k_cache, v_cache = narrow(k32), narrow(v32)
    query = torch.randn(len(seq_lens), 3 * group, head_dim)
    lens = torch.tensor(seq_lens, dtype=torch.int32)
    scale = head_dim**-0.5
    out = torch.full_like(query, float("nan"))
    assert kernels is not None
    kernels.paged_decode(query, k_cache, v_cache, tables, lens, scale, out)
    held = paged_decode_attention(query, widen(k_cache), widen(v_cache), tables, lens, 350, scale)
    torch.testing.assert_close(out, held, **TIGHT)
    before = paged_decode_attention(query, k32, v32, tables, lens, 350, scale)
    torch.testing.assert_close(out, before, **loose)
    torch_path = paged_decode_attention(query, k_cache, v_cache, tables, lens, 350, scale)
    torch.testing.assert_close(torch_path, held, **TIGHT)


def test_the_write_kernel_rounds_like_torch_nearest_even_and_skips_padding() -> None:
    # Values exactly halfway between two bf16 numbers round to the even one; NaN stays NaN.
    ties = torch.tensor([1 + 2**-8, 1 + 3 * 2**-8, -(1 + 2**-8), 2**-8 + 2**-16])
    special = torch.tensor([float("inf"), float("-inf"), 3.0e38, -0.0])
    rows = torch.cat([ties, special, torch.randn(64 - 8) * 1e3]).view(1, 1, 64).repeat(4, 1, 1)
    rows[1:] = torch.randn(3, 1, 64)
    k_cache = torch.zeros(2, 4, 1, 64, dtype=torch.bfloat16)
    v_cache = torch.zeros_like(k_cache)
    slots = torch.tensor([5, -1, 0, 7])
    assert kernels is not None
    kernels.write_kv_cache(rows, rows * 2, k_cache, v_cache, slots)
    written = slots >= 0
    flat_k, flat_v = k_cache.view(8, 1, 64), v_cache.view(8, 1, 64)
    assert torch.equal(flat_k[slots[written]], rows[written].to(torch.bfloat16))
    assert torch.equal(flat_v[slots[written]], (rows[written] * 2).to(torch.bfloat16))
    assert flat_k[5, 0, :2].tolist() == [1.0, 1 + 2**-6]  # ties went to the even neighbour
    untouched = torch.ones(8, dtype=torch.bool)
    untouched[slots[written]] = False
    assert not flat_k[untouched].any()  # the padding row (slot -1) wrote nothing

    nan = torch.full((1, 1, 64), float("nan"))
    kernels.write_kv_cache(nan, nan, k_cache, v_cache, torch.tensor([1]))
    assert flat_k[1].isnan().all() and flat_v[1].isnan().all()


def test_kernels_refuse_caches_of_mixed_or_unsupported_dtypes() -> None:
    query = torch.randn(1, 2, 16)
    k_cache = torch.zeros(2, 16, 2, 16, dtype=torch.bfloat16)
    tables, lens = torch.zeros(1, 1, dtype=torch.int32), torch.ones(1, dtype=torch.int32)
    assert kernels is not None
    with pytest.raises(RuntimeError, match="K and V caches must both be"):
        kernels.paged_decode(query, k_cache, k_cache.float(), tables, lens, 0.1, query.clone())
    with pytest.raises(RuntimeError, match="K and V caches must both be"):
        half = k_cache.half()
        kernels.write_kv_cache(query, query, half, half, torch.zeros(1, dtype=torch.long))


@pytest.mark.parametrize("per_row_max_context", [2048, 20])
def test_cpu_backend_over_a_bf16_cache_matches_the_torch_path_on_a_mixed_step(
    per_row_max_context: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Decodes, a fresh prompt, a chunk over a cached prefix, a long chunk: through the per-row
    # kernel, or (limit 20) the chunk of 37 through SDPA; the pure-torch backend
    # (--no-cpu-kernels) over its own bf16 cache gives the same output and the same cache.
    monkeypatch.setattr(torch_attention, "PER_ROW_PREFILL_MAX_CONTEXT", per_row_max_context)
    step = mixed_step()
    out, expected = forward_both_backends(step, *bf16(step.k_cache, step.v_cache))
    torch.testing.assert_close(out, expected, **TIGHT)
    # And within bf16's precision of the same step over a float32 cache.
    unrounded, _ = forward_both_backends(step, step.k_cache, step.v_cache)
    torch.testing.assert_close(out, unrounded, **LOOSE)


def test_prefills_through_sdpa_see_the_same_rounded_kv_as_the_kernel(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The same step twice over a bf16 cache: every row through the C++ kernel (which reads K/V
    # back from the cache), then every prefill through SDPA, the fresh prompt's from the step's
    # own K/V without a gather. Both attend to the bf16-rounded K/V: float32-tight agreement.
    gen = torch.Generator().manual_seed(4)
    query_lens, seq_lens = [1, 12, 30], [40, 12, 30 + 16]
    meta, num_blocks = attention_metadata(query_lens, seq_lens, 16, gen)
    k_cache, v_cache = bf16(*torch.randn(2, num_blocks, 16, 2, 32, generator=gen))
    qkv = torch.randn(meta.num_tokens, 6 + 2 + 2, 32, generator=gen)
    query, key, value = qkv.split([6, 2, 2], dim=1)
    per_row = TorchAttentionBackend().forward(query, key, value, k_cache, v_cache, meta, 0.2)
    monkeypatch.setattr(torch_attention, "PER_ROW_PREFILL_MAX_CONTEXT", 1)
    monkeypatch.setattr(torch_attention, "PER_ROW_MAX_QUERY_LEN", 1)
    meta.backend_cache.clear()
    through_sdpa = TorchAttentionBackend().forward(query, key, value, k_cache, v_cache, meta, 0.2)
    assert torch_attention.per_token_context(meta)[2] == [1, 2]
    torch.testing.assert_close(through_sdpa, per_row, **TIGHT)
