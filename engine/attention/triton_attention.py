"""Paged attention in Triton: the GPU backend.

Three kernels, each with its pure-torch reference in `engine.attention.torch_attention` (the tests
compare them, on CPU under TRITON_INTERPRET=1 and on a GPU):

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
The wrappers' layout checks, grids and split/tile sizes are in `engine.attention.triton_launch`.
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
from engine.attention.triton_launch import (
    check_attention,
    check_cache,
    check_heads,
    choose_num_splits,
    output_for,
    plan_decode,
    plan_prefill,
    split_buffers,
)

__all__ = [
    "DECODE_BLOCK_N",
    "DECODE_NUM_WARPS",
    "PREFILL_BLOCK_M",
    "PREFILL_BLOCK_N",
    "PREFILL_NUM_WARPS",
    "TritonAttentionBackend",
    "choose_num_splits",
    "merge_splits_reference",
    "merge_splits_triton",
    "paged_decode_attention_triton",
    "paged_prefill_attention_triton",
    "write_kv_cache_triton",
]


def write_kv_cache_triton(
    key: torch.Tensor,
    value: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
) -> None:
    """Scatter [num_tokens, num_kv_heads, head_dim] K/V into their slots; slot < 0 is skipped."""
    block_size, num_kv_heads, head_dim = check_cache(k_cache, v_cache)
    check_heads(key, num_kv_heads, head_dim, k_cache)
    check_heads(value, num_kv_heads, head_dim, k_cache)
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
    num_seqs = query.shape[0]
    shape = check_attention(query, k_cache, v_cache, block_tables, seq_lens, num_seqs)
    out = output_for(query, out, shape, k_cache)
    if num_seqs == 0:
        return out
    launch = plan_decode(query, k_cache, shape, max_seq_len, num_splits)
    part_acc, part_max, part_sum = split_buffers(query, launch, shape)
    paged_decode_kernel[launch.grid](
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
        launch.tokens_per_split,
        *query.stride()[:2],
        *out.stride()[:2],
        *k_cache.stride()[:3],
        block_tables.stride(0),
        **launch.constexprs,
    )
    if launch.split:
        merge_splits_triton(part_acc, part_max, part_sum, seq_lens, launch.tokens_per_split, out)
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
    num_seqs = seq_lens.shape[0]
    shape = check_attention(query, k_cache, v_cache, block_tables, seq_lens, num_seqs)
    assert query_start_loc.dtype == torch.int32 and query_start_loc.shape == (num_seqs + 1,)
    assert query_start_loc.stride(0) == 1
    out = output_for(query, out, shape, k_cache)
    if num_seqs == 0 or max_query_len == 0:
        return out
    grid, constexprs = plan_prefill(query, k_cache, shape, max_query_len, num_seqs)
    paged_prefill_kernel[grid](
        out,
        query,
        k_cache,
        v_cache,
        block_tables,
        seq_lens,
        query_start_loc,
        scale * LOG2_E,
        *query.stride()[:2],
        *out.stride()[:2],
        *k_cache.stride()[:3],
        block_tables.stride(0),
        **constexprs,
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
