"""The C++ paged decode kernel against the torch reference."""

from __future__ import annotations

import pytest
import torch

from engine.cpu_kernels import load_cpu_kernels
from engine.torch_attention import paged_decode_attention

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
@pytest.mark.parametrize("block_size", [16, 32])
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
