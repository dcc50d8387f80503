"""Paged attention in Triton: the GPU backend.

Three kernels, each with its pure-torch reference in `engine.attention.torch_attention` (the tests compare
them, on CPU under TRITON_INTERPRET=1 and on a GPU):

    write_kv_cache_kernel     grid (num_tokens,)                     ref: write_kv_cache
    paged_decode_kernel       grid (num_decodes, num_kv_heads, num_splits)
                                                                      ref: paged_decode_attention
    merge_splits_kernel       grid (num_decodes, num_heads)          ref: merge_splits_reference
    paged_prefill_kernel      grid (num_prefills, cdiv(max_query_len, BLOCK_Q), num_kv_heads)
                                                                      ref: paged_attention

Every attention kernel reads K/V only through the block table; a token n of sequence s lives at

    block = block_tables[s, n // block_size]   offset = n % block_size
    k_cache[block, offset, kv_head, :]

so a tile of BLOCK_N tokens is a gather of BLOCK_N rows, each contiguous in head_dim. Scores are
computed in fp32, in base 2 (scale * log2(e) folded into one multiplier), with an online softmax.
"""

from __future__ import annotations

import torch

from engine.attention.backend import AttentionMetadata
from engine.attention.triton_kernels import (
    DECODE_BLOCK_N,
    DECODE_NUM_WARPS,
    LOG2_E,
    PREFILL_BLOCK_M,
    PREFILL_BLOCK_N,
    PREFILL_NUM_WARPS,
    merge_splits_kernel,
    paged_decode_kernel,
    paged_prefill_kernel,
    triton,
    write_kv_cache_kernel,
)

# Decode split-K heuristic: split when there are too few (sequence, kv head) programs to keep every
# SM busy with several programs; never split below _MIN_TOKENS_PER_SPLIT tokens per program.
_TARGET_PROGRAMS_PER_SM = 4
_MIN_TOKENS_PER_SPLIT = 256
_MAX_SPLITS = 32


def _check_cache(k_cache: torch.Tensor, v_cache: torch.Tensor) -> tuple[int, int, int]:
    """(block_size, num_kv_heads, head_dim) of a K/V cache pair, after checking its layout."""
    assert k_cache.dim() == 4 and k_cache.shape == v_cache.shape, (k_cache.shape, v_cache.shape)
    assert k_cache.stride() == v_cache.stride() and k_cache.stride(3) == 1, k_cache.stride()
    assert k_cache.dtype == v_cache.dtype and k_cache.device == v_cache.device
    _, block_size, num_kv_heads, head_dim = k_cache.shape
    assert head_dim >= 16 and head_dim & (head_dim - 1) == 0, f"head_dim {head_dim}: a power of 2"
    return block_size, num_kv_heads, head_dim


def _check_heads(x: torch.Tensor, num_heads: int, head_dim: int, cache: torch.Tensor) -> None:
    """x: [tokens, num_heads, head_dim], contiguous in head_dim, on the cache's device and dtype."""
    assert x.dim() == 3 and x.shape[1:] == (num_heads, head_dim), (x.shape, num_heads, head_dim)
    assert x.stride(2) == 1, x.stride()
    assert x.dtype == cache.dtype and x.device == cache.device, (x.dtype, x.device)


def _check_table(block_tables: torch.Tensor, seq_lens: torch.Tensor, num_seqs: int) -> None:
    assert block_tables.dtype == torch.int32 and seq_lens.dtype == torch.int32
    assert block_tables.dim() == 2 and block_tables.shape[0] == num_seqs, block_tables.shape
    assert block_tables.stride(1) == 1, block_tables.stride()
    assert seq_lens.shape == (num_seqs,) and seq_lens.is_contiguous()


def _dot_precision(dtype: torch.dtype) -> str:
    # NOTE: fp32 must not be rounded to tf32, or the fp32 tests' 1e-4 tolerance fails on a GPU.
    return "ieee" if dtype == torch.float32 else "tf32"


def _int64_offsets(cache: torch.Tensor) -> bool:
    return cache.numel() >= 2**31


def write_kv_cache_triton(
    key: torch.Tensor,
    value: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
) -> None:
    """Scatter [num_tokens, num_kv_heads, head_dim] K/V into their slots; slot < 0 is skipped."""
    block_size, num_kv_heads, head_dim = _check_cache(k_cache, v_cache)
    _check_heads(key, num_kv_heads, head_dim, k_cache)
    _check_heads(value, num_kv_heads, head_dim, k_cache)
    assert slot_mapping.dtype == torch.int64 and slot_mapping.dim() == 1
    assert slot_mapping.is_contiguous() and slot_mapping.shape[0] <= key.shape[0]
    num_tokens = slot_mapping.shape[0]
    if num_tokens == 0:
        return
    write_kv_cache_kernel[(num_tokens,)](
        key,
        value,
        k_cache,
        v_cache,
        slot_mapping,
        key.stride(0),
        key.stride(1),
        value.stride(0),
        value.stride(1),
        k_cache.stride(0),
        k_cache.stride(1),
        k_cache.stride(2),
        NUM_KV_HEADS=num_kv_heads,
        HEADS_PAD=triton.next_power_of_2(num_kv_heads),
        HEAD_DIM=head_dim,
        BLOCK_SIZE=block_size,
    )


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


def _num_sms(device: torch.device) -> int:
    if device.type != "cuda":
        return 1  # the interpreter: no split unless a test forces one
    return torch.cuda.get_device_properties(device).multi_processor_count


def paged_decode_attention_triton(
    query: torch.Tensor,  # [num_seqs, num_heads, head_dim]
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    max_seq_len: int,
    scale: float,
    out: torch.Tensor | None = None,
    num_splits: int | None = None,
) -> torch.Tensor:
    """One query token per sequence (ref: torch_attention.paged_decode_attention).

    max_seq_len bounds every seq_len (an upper bound such as max_model_len is fine: it only sizes
    the splits). num_splits forces the split-K variant's split count; None picks it by shape.
    """
    block_size, num_kv_heads, head_dim = _check_cache(k_cache, v_cache)
    num_seqs, num_heads = query.shape[0], query.shape[1]
    assert num_heads % num_kv_heads == 0, (num_heads, num_kv_heads)
    _check_heads(query, num_heads, head_dim, k_cache)
    _check_table(block_tables, seq_lens, num_seqs)
    out = torch.empty_like(query) if out is None else out
    _check_heads(out, num_heads, head_dim, k_cache)
    if num_seqs == 0:
        return out
    if num_splits is None:
        num_splits = choose_num_splits(num_seqs, num_kv_heads, max_seq_len, _num_sms(query.device))
    # Splits start on a KV-block boundary; the last one may be shorter (or empty for short seqs).
    tokens_per_split = triton.cdiv(triton.cdiv(max_seq_len, num_splits), block_size) * block_size
    num_splits = triton.cdiv(max_seq_len, tokens_per_split)
    group = num_heads // num_kv_heads
    grid = (num_seqs, num_kv_heads, num_splits)
    part_shape = (num_seqs, num_heads, num_splits)
    split = num_splits > 1
    part_max = query.new_empty(part_shape if split else (1,), dtype=torch.float32)
    part_sum = torch.empty_like(part_max)
    part_acc = query.new_empty((*part_shape, head_dim) if split else (1,), dtype=torch.float32)
    paged_decode_kernel[grid](
        out,
        query,
        k_cache,
        v_cache,
        block_tables,
        seq_lens,
        part_acc,
        part_max,
        part_sum,
        scale * LOG2_E,
        tokens_per_split,
        query.stride(0),
        query.stride(1),
        out.stride(0),
        out.stride(1),
        k_cache.stride(0),
        k_cache.stride(1),
        k_cache.stride(2),
        block_tables.stride(0),
        GROUP=group,
        GROUP_PAD=max(16, triton.next_power_of_2(group)),
        HEAD_DIM=head_dim,
        BLOCK_SIZE=block_size,
        BLOCK_N=DECODE_BLOCK_N,
        SPLIT=split,
        DOT_PRECISION=_dot_precision(query.dtype),
        INT64_OFFSETS=_int64_offsets(k_cache),
        num_warps=DECODE_NUM_WARPS,
    )
    if split:
        merge_splits_triton(part_acc, part_max, part_sum, seq_lens, tokens_per_split, out)
    return out


def merge_splits_triton(
    part_acc: torch.Tensor,  # [num_seqs, num_heads, num_splits, head_dim] fp32
    part_max: torch.Tensor,  # [num_seqs, num_heads, num_splits] fp32, base-2 logits
    part_sum: torch.Tensor,  # [num_seqs, num_heads, num_splits] fp32
    seq_lens: torch.Tensor,
    tokens_per_split: int,
    out: torch.Tensor,  # [num_seqs, num_heads, head_dim]
) -> torch.Tensor:
    """The split-K reduction (ref: merge_splits_reference); splits past a sequence's end are
    ignored, whatever they hold."""
    num_seqs, num_heads, num_splits, head_dim = part_acc.shape
    assert part_acc.is_contiguous() and part_max.is_contiguous() and part_sum.is_contiguous()
    assert part_max.shape == part_sum.shape == (num_seqs, num_heads, num_splits)
    assert part_acc.dtype == part_max.dtype == part_sum.dtype == torch.float32
    assert out.shape == (num_seqs, num_heads, head_dim) and out.stride(2) == 1, out.shape
    assert seq_lens.shape == (num_seqs,) and seq_lens.is_contiguous()
    merge_splits_kernel[(num_seqs, num_heads)](
        out,
        part_acc,
        part_max,
        part_sum,
        seq_lens,
        tokens_per_split,
        num_splits,
        out.stride(0),
        out.stride(1),
        HEAD_DIM=head_dim,
        SPLITS_PAD=triton.next_power_of_2(num_splits),
    )
    return out


def merge_splits_reference(
    part_acc: torch.Tensor,
    part_max: torch.Tensor,
    part_sum: torch.Tensor,
    seq_lens: torch.Tensor,
    tokens_per_split: int,
) -> torch.Tensor:
    """The torch reference of merge_splits_triton: [num_seqs, num_heads, head_dim]."""
    num_valid = (seq_lens.long() + tokens_per_split - 1) // tokens_per_split
    splits = torch.arange(part_max.shape[2], device=part_max.device)
    valid = (splits[None, :] < num_valid[:, None])[:, None, :]  # [S, 1, splits]
    m = torch.where(valid, part_max, float("-inf"))
    w = torch.where(valid, torch.exp2(m - m.amax(dim=2, keepdim=True)), 0.0)
    acc = torch.where(valid[..., None], part_acc, 0.0)
    l_sum = torch.where(valid, part_sum, 0.0)
    return (acc * w[..., None]).sum(2) / (l_sum * w).sum(2)[..., None]


def paged_prefill_attention_triton(
    query: torch.Tensor,  # [num_tokens, num_heads, head_dim]: the whole step's queries
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,  # [num_seqs, max_num_blocks]
    seq_lens: torch.Tensor,  # [num_seqs]
    query_start_loc: torch.Tensor,  # [num_seqs + 1]: row offsets into query and out
    max_query_len: int,
    scale: float,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """Causal varlen attention over each sequence's cached prefix and its new tokens, all read
    through the block table (ref: torch_attention.paged_attention). Writes only the rows of the
    given sequences, so a caller passes the prefill part of a mixed batch and the whole `out`."""
    block_size, num_kv_heads, head_dim = _check_cache(k_cache, v_cache)
    num_heads = query.shape[1]
    assert num_heads % num_kv_heads == 0, (num_heads, num_kv_heads)
    _check_heads(query, num_heads, head_dim, k_cache)
    num_seqs = seq_lens.shape[0]
    _check_table(block_tables, seq_lens, num_seqs)
    assert query_start_loc.dtype == torch.int32 and query_start_loc.shape == (num_seqs + 1,)
    assert query_start_loc.stride(0) == 1
    out = torch.empty_like(query) if out is None else out
    _check_heads(out, num_heads, head_dim, k_cache)
    if num_seqs == 0 or max_query_len == 0:
        return out
    group = num_heads // num_kv_heads
    group_pad = triton.next_power_of_2(group)
    block_q = max(1, PREFILL_BLOCK_M // group_pad)
    grid = (num_seqs, triton.cdiv(max_query_len, block_q), num_kv_heads)
    paged_prefill_kernel[grid](
        out,
        query,
        k_cache,
        v_cache,
        block_tables,
        seq_lens,
        query_start_loc,
        scale * LOG2_E,
        query.stride(0),
        query.stride(1),
        out.stride(0),
        out.stride(1),
        k_cache.stride(0),
        k_cache.stride(1),
        k_cache.stride(2),
        block_tables.stride(0),
        GROUP=group,
        GROUP_PAD=group_pad,
        HEAD_DIM=head_dim,
        BLOCK_SIZE=block_size,
        BLOCK_Q=block_q,
        BLOCK_N=PREFILL_BLOCK_N,
        DOT_PRECISION=_dot_precision(query.dtype),
        INT64_OFFSETS=_int64_offsets(k_cache),
        num_warps=PREFILL_NUM_WARPS,
    )
    return out


class TritonAttentionBackend:
    """The GPU backend: one cache-write launch, then the decode kernel on the batch's leading
    decodes and the prefill kernel on the rest, both writing into one output tensor."""

    name = "triton"

    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        meta: AttentionMetadata,
        scale: float,
        out_dtype: torch.dtype | None = None,
    ) -> torch.Tensor:
        write_kv_cache_triton(key, value, k_cache, v_cache, meta.slot_mapping)
        out = torch.empty_like(query)
        nd = meta.num_decodes
        if nd:
            paged_decode_attention_triton(
                query[:nd],
                k_cache,
                v_cache,
                meta.block_tables[:nd],
                meta.seq_lens[:nd],
                meta.max_seq_len,
                scale,
                out=out[:nd],
            )
        if meta.num_seqs > nd:
            paged_prefill_attention_triton(
                query,
                k_cache,
                v_cache,
                meta.block_tables[nd:],
                meta.seq_lens[nd:],
                meta.query_start_loc[nd:],
                meta.max_query_len,
                scale,
                out=out,
            )
        return out if out_dtype is None else out.to(out_dtype)
