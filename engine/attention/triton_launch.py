"""Launch parameters of the Triton attention kernels: the layout checks every wrapper in
`engine.attention.triton_attention` runs first, and the grid, split and tile sizes it launches with.
Pure host-side arithmetic on shapes; nothing here launches a kernel.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from engine.attention.triton_kernels import (
    DECODE_BLOCK_N,
    DECODE_NUM_WARPS,
    PREFILL_BLOCK_M,
    PREFILL_BLOCK_N,
    PREFILL_NUM_WARPS,
    triton,
)

# Decode split-K heuristic: split when there are too few (sequence, kv head) programs to keep every
# SM busy with several programs; never split below _MIN_TOKENS_PER_SPLIT tokens per program.
_TARGET_PROGRAMS_PER_SM = 4
_MIN_TOKENS_PER_SPLIT = 256
_MAX_SPLITS = 32


@dataclass(frozen=True)
class AttentionShape:
    """The sizes a launch depends on, read from the K/V cache and the query."""

    block_size: int
    num_kv_heads: int
    head_dim: int
    num_heads: int

    @property
    def group(self) -> int:
        """Query heads per KV head."""
        return self.num_heads // self.num_kv_heads


def check_cache(k_cache: torch.Tensor, v_cache: torch.Tensor) -> tuple[int, int, int]:
    """(block_size, num_kv_heads, head_dim) of a K/V cache pair, after checking its layout."""
    assert k_cache.dim() == 4 and k_cache.shape == v_cache.shape, (k_cache.shape, v_cache.shape)
    assert k_cache.stride() == v_cache.stride() and k_cache.stride(3) == 1, k_cache.stride()
    assert k_cache.dtype == v_cache.dtype and k_cache.device == v_cache.device
    _, block_size, num_kv_heads, head_dim = k_cache.shape
    assert head_dim >= 16 and head_dim & (head_dim - 1) == 0, f"head_dim {head_dim}: a power of 2"
    return block_size, num_kv_heads, head_dim


def check_heads(x: torch.Tensor, num_heads: int, head_dim: int, cache: torch.Tensor) -> None:
    """x: [tokens, num_heads, head_dim], contiguous in head_dim, on the cache's device and dtype."""
    assert x.dim() == 3 and x.shape[1:] == (num_heads, head_dim), (x.shape, num_heads, head_dim)
    assert x.stride(2) == 1, x.stride()
    assert x.dtype == cache.dtype and x.device == cache.device, (x.dtype, x.device)


def check_table(block_tables: torch.Tensor, seq_lens: torch.Tensor, num_seqs: int) -> None:
    assert block_tables.dtype == torch.int32 and seq_lens.dtype == torch.int32
    assert block_tables.dim() == 2 and block_tables.shape[0] == num_seqs, block_tables.shape
    assert block_tables.stride(1) == 1, block_tables.stride()
    assert seq_lens.shape == (num_seqs,) and seq_lens.is_contiguous()


def check_attention(
    query: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    num_seqs: int,
) -> AttentionShape:
    """The checks shared by the decode and prefill wrappers: cache, query and block table."""
    block_size, num_kv_heads, head_dim = check_cache(k_cache, v_cache)
    num_heads = query.shape[1]
    assert num_heads % num_kv_heads == 0, (num_heads, num_kv_heads)
    check_heads(query, num_heads, head_dim, k_cache)
    check_table(block_tables, seq_lens, num_seqs)
    return AttentionShape(block_size, num_kv_heads, head_dim, num_heads)


def output_for(
    query: torch.Tensor, out: torch.Tensor | None, shape: AttentionShape, cache: torch.Tensor
) -> torch.Tensor:
    """The caller's `out` after checking it, or a new tensor like the query."""
    out = torch.empty_like(query) if out is None else out
    check_heads(out, shape.num_heads, shape.head_dim, cache)
    return out


def dot_precision(dtype: torch.dtype) -> str:
    # NOTE: fp32 must not be rounded to tf32, or the fp32 tests' 1e-4 tolerance fails on a GPU.
    return "ieee" if dtype == torch.float32 else "tf32"


def int64_offsets(cache: torch.Tensor) -> bool:
    return cache.numel() >= 2**31


def choose_num_splits(num_seqs: int, num_kv_heads: int, max_seq_len: int, num_sms: int) -> int:
    """Split-K only when (sequence, kv head) programs are too few to fill the GPU, and the
    context is long enough that every split still reads _MIN_TOKENS_PER_SPLIT tokens or more."""
    num_programs = num_seqs * num_kv_heads
    target = _TARGET_PROGRAMS_PER_SM * num_sms
    if num_programs >= target:
        return 1
    by_occupancy = triton.cdiv(target, num_programs)
    by_length = max_seq_len // _MIN_TOKENS_PER_SPLIT
    return max(1, min(by_occupancy, by_length, _MAX_SPLITS))


def num_sms(device: torch.device) -> int:
    if device.type != "cuda":
        return 1  # the interpreter: no split unless a test forces one
    return torch.cuda.get_device_properties(device).multi_processor_count


def _common_constexprs(
    query: torch.Tensor, k_cache: torch.Tensor, shape: AttentionShape
) -> dict[str, Any]:
    return {
        "GROUP": shape.group,
        "HEAD_DIM": shape.head_dim,
        "BLOCK_SIZE": shape.block_size,
        "DOT_PRECISION": dot_precision(query.dtype),
        "INT64_OFFSETS": int64_offsets(k_cache),
    }


@dataclass(frozen=True)
class DecodeLaunch:
    """Grid and split-K sizes of one paged_decode_kernel launch."""

    grid: tuple[int, int, int]  # (num_seqs, num_kv_heads, num_splits)
    tokens_per_split: int
    constexprs: dict[str, Any]  # the kernel's compile-time arguments, num_warps included

    @property
    def num_splits(self) -> int:
        return self.grid[2]

    @property
    def split(self) -> bool:
        return self.num_splits > 1


def plan_decode(
    query: torch.Tensor,
    k_cache: torch.Tensor,
    shape: AttentionShape,
    max_seq_len: int,
    num_splits: int | None,
) -> DecodeLaunch:
    """num_splits forces the split count (before rounding to whole KV blocks); None picks it."""
    num_seqs = query.shape[0]
    if num_splits is None:
        num_splits = choose_num_splits(
            num_seqs, shape.num_kv_heads, max_seq_len, num_sms(query.device)
        )
    # Splits start on a KV-block boundary; the last one may be shorter (or empty for short seqs).
    block_size = shape.block_size
    tokens_per_split = triton.cdiv(triton.cdiv(max_seq_len, num_splits), block_size) * block_size
    num_splits = triton.cdiv(max_seq_len, tokens_per_split)
    constexprs = _common_constexprs(query, k_cache, shape) | {
        "GROUP_PAD": max(16, triton.next_power_of_2(shape.group)),
        "BLOCK_N": DECODE_BLOCK_N,
        "SPLIT": num_splits > 1,
        "num_warps": DECODE_NUM_WARPS,
    }
    grid = (num_seqs, shape.num_kv_heads, num_splits)
    return DecodeLaunch(grid, tokens_per_split, constexprs)


def split_buffers(
    query: torch.Tensor, launch: DecodeLaunch, shape: AttentionShape
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(part_acc, part_max, part_sum): the split-K partials, fp32; 1-element dummies unsplit."""
    part_shape = (query.shape[0], shape.num_heads, launch.num_splits)
    split = launch.split
    part_max = query.new_empty(part_shape if split else (1,), dtype=torch.float32)
    part_sum = torch.empty_like(part_max)
    part_acc = query.new_empty(
        (*part_shape, shape.head_dim) if split else (1,), dtype=torch.float32
    )
    return part_acc, part_max, part_sum


def plan_prefill(
    query: torch.Tensor,
    k_cache: torch.Tensor,
    shape: AttentionShape,
    max_query_len: int,
    num_seqs: int,
) -> tuple[tuple[int, int, int], dict[str, Any]]:
    """(grid, constexprs) of one paged_prefill_kernel launch: a program per (sequence, BLOCK_Q
    query tokens, kv head), each holding BLOCK_Q x GROUP_PAD query rows."""
    group_pad = triton.next_power_of_2(shape.group)
    block_q = max(1, PREFILL_BLOCK_M // group_pad)
    grid = (num_seqs, triton.cdiv(max_query_len, block_q), shape.num_kv_heads)
    constexprs = _common_constexprs(query, k_cache, shape) | {
        "GROUP_PAD": group_pad,
        "BLOCK_Q": block_q,
        "BLOCK_N": PREFILL_BLOCK_N,
        "num_warps": PREFILL_NUM_WARPS,
    }
    return grid, constexprs
