"""The int8 KV cache's format (EngineConfig.kv_cache_dtype="int8", CPU, float32 activations).

Each cache row, one token's one KV head, is head_dim signed bytes followed by the row's float32
scale in 4 more bytes: the cache is [num_blocks, block_size, num_kv_heads, head_dim + 4] int8, so
a row and its scale are one contiguous read and nothing else needs paging. A row x is written as
round(x * (127 / max|x|)) (ties to even, within [-127, 127]) with scale max|x| * (1 / 127), read as
int8 * scale: each element within half a step, max|x| / 254, of what was written.

The C++ write kernel (engine/kernels/csrc/kv_cache_write_cpu.cpp) does the same float32 arithmetic
in the same order, so both paths store the same bytes."""

from __future__ import annotations

import torch

SCALE_BYTES = 4


def cache_head_width(head_dim: int, cache_dtype: torch.dtype) -> int:
    """The elements one KV head's row of a token takes in a cache of `cache_dtype`."""
    return head_dim + SCALE_BYTES if cache_dtype == torch.int8 else head_dim


def quantize_rows(x: torch.Tensor) -> torch.Tensor:
    """[..., head_dim] float -> [..., head_dim + 4] int8, each row with its scale."""
    x = x.float()
    amax = x.abs().amax(dim=-1, keepdim=True)
    inv = torch.where(amax > 0, 127.0 / amax, torch.zeros_like(amax))
    q = torch.round(x * inv).clamp_(-127, 127).to(torch.int8)
    scale = (amax * (1 / 127)).contiguous().view(torch.int8)  # [..., 4]: the float's bytes
    return torch.cat([q, scale], dim=-1)


def dequantize_rows(rows: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """[..., head_dim + 4] int8 rows -> [..., head_dim] in `dtype`."""
    values, scale = rows[..., :-SCALE_BYTES], rows[..., -SCALE_BYTES:].contiguous()
    return (values.float() * scale.view(torch.float32)).to(dtype)
