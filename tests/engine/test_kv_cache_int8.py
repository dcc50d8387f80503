"""An int8 KV cache under float32 activations (EngineConfig.kv_cache_dtype="int8", CPU).

Specification (engine/attention/kv_quant.py): each token's head row is stored as head_dim int8
values and the row's float32 scale, max|x| / 127, after them; reads give int8 * scale. The C++
write kernel stores the same bytes as the torch path; the C++ decode kernel over an int8 cache
agrees with float32 attention over the dequantised K/V as tightly as the float32 kernels do;
and against the float32 K/V it is off by no more than the quantisation allows (each element
within max|x| / 254 of itself)."""

from __future__ import annotations

import pytest
import torch

from engine.attention import torch_attention
from engine.attention.kv_quant import dequantize_rows, quantize_rows
from engine.kernels.cpu_kernels import load_cpu_kernels
from tests.engine.attention_factories import forward_both_backends, mixed_step
from tests.engine.test_kv_cache_bf16 import TIGHT, check_decode_over_a_narrow_cache

kernels = load_cpu_kernels()
pytestmark = pytest.mark.skipif(kernels is None, reason="no C++ toolchain to build the kernels")

LOOSE = {"rtol": 0.0, "atol": 6e-2}  # int8 K/V against float32 K/V, unit-scale random data


def test_a_row_round_trips_within_half_a_step_of_its_largest_magnitude() -> None:
    x = torch.randn(50, 4, 64) * torch.logspace(-3, 3, 50).view(50, 1, 1)
    rows = quantize_rows(x)
    assert rows.dtype == torch.int8 and rows.shape == (50, 4, 68)
    step = x.abs().amax(-1, keepdim=True) / 127
    assert ((dequantize_rows(rows, torch.float32) - x).abs() <= step / 2 * (1 + 1e-5)).all()
    zero = quantize_rows(torch.zeros(1, 1, 16))
    assert not zero.any()  # an all-zero row: zeros, scale 0


def test_the_write_kernel_stores_the_bytes_the_torch_path_stores_and_skips_padding() -> None:
    gen = torch.Generator().manual_seed(3)
    key = torch.randn(6, 2, 64, generator=gen) * 3
    value = torch.randn(6, 2, 64, generator=gen)
    key[2] = 0.0  # a zero row
    key[3, 0, 5] = 1 + 0.5 / 127  # ties land on the even neighbour in both paths
    slots = torch.tensor([5, -1, 0, 7, 30, 31])
    k_cache = torch.zeros(4, 8, 2, 68, dtype=torch.int8)
    v_cache = torch.zeros_like(k_cache)
    expected_k, expected_v = k_cache.clone(), v_cache.clone()
    keep = slots >= 0
    torch_attention.write_kv_cache(key[keep], value[keep], expected_k, expected_v, slots[keep])
    assert kernels is not None
    kernels.write_kv_cache(key, value, k_cache, v_cache, slots)
    assert torch.equal(k_cache, expected_k) and torch.equal(v_cache, expected_v)
    assert not k_cache.view(32, 2, 68)[1].any()  # slot 1 was nobody's


@pytest.mark.parametrize("head_dim", [16, 32, 64, 128])
@pytest.mark.parametrize("group", [1, 3, 8])
@pytest.mark.parametrize("block_size", [16, 32])
def test_decode_over_an_int8_cache_matches_float32_attention_over_the_dequantised_kv(
    head_dim: int, group: int, block_size: int
) -> None:
    widen = lambda c: dequantize_rows(c, torch.float32)  # noqa: E731
    check_decode_over_a_narrow_cache(quantize_rows, widen, head_dim, group, block_size, LOOSE)


def test_the_decode_kernel_refuses_an_int8_cache_without_room_for_the_scales() -> None:
    query = torch.randn(1, 2, 16)
    k_cache = torch.zeros(2, 16, 2, 16, dtype=torch.int8)
    tables, lens = torch.zeros(1, 1, dtype=torch.int32), torch.ones(1, dtype=torch.int32)
    assert kernels is not None
    with pytest.raises(RuntimeError, match="head_dim differ"):
        kernels.paged_decode(query, k_cache, k_cache, tables, lens, 0.1, query.clone())


@pytest.mark.parametrize("per_row_max_context", [2048, 20])
def test_cpu_backend_over_an_int8_cache_matches_the_torch_path_on_a_mixed_step(
    per_row_max_context: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Decodes, a fresh prompt, a chunk over a cached prefix, a long chunk: through the per-row
    # kernel, or (limit 20) the chunk of 37 through SDPA; the pure-torch backend over
    # its own int8 cache gives the same output and the same cache bytes.
    monkeypatch.setattr(torch_attention, "PER_ROW_PREFILL_MAX_CONTEXT", per_row_max_context)
    step = mixed_step()
    quantised = quantize_rows(step.k_cache), quantize_rows(step.v_cache)
    out, expected = forward_both_backends(step, *quantised)
    torch.testing.assert_close(out, expected, **TIGHT)
    unquantised, _ = forward_both_backends(step, step.k_cache, step.v_cache)
    torch.testing.assert_close(out, unquantised, **LOOSE)
