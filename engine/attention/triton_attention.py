"""Paged attention in Triton: the GPU backend.

Three kernels, each with its pure-torch reference in `engine.attention.torch_attention` (the tests compare
them, on CPU under TRITON_INTERPRET=1 and on a GPU):

    _write_kv_cache_kernel     grid (num_tokens,)                     ref: write_kv_cache
    _paged_decode_kernel       grid (num_decodes, num_kv_heads, num_splits)
                                                                      ref: paged_decode_attention
    _merge_splits_kernel       grid (num_decodes, num_heads)          ref: merge_splits_reference
    _paged_prefill_kernel      grid (num_prefills, cdiv(max_query_len, BLOCK_Q), num_kv_heads)
                                                                      ref: paged_attention

Every attention kernel reads K/V only through the block table; a token n of sequence s lives at

    block = block_tables[s, n // block_size]   offset = n % block_size
    k_cache[block, offset, kv_head, :]

so a tile of BLOCK_N tokens is a gather of BLOCK_N rows, each contiguous in head_dim. Scores are
computed in fp32, in base 2 (scale * log2(e) folded into one multiplier), with an online softmax.
"""

from __future__ import annotations

import torch

try:
    import triton
    import triton.language as tl
except ImportError as e:  # pragma: no cover - exercised by a subprocess test
    raise ImportError(
        "the 'triton' attention backend needs the triton package "
        "(pip install 'pagedock[gpu]'); use the 'torch' backend without it"
    ) from e

from engine.attention.backend import AttentionMetadata

_LOG2_E = 1.4426950408889634
# Decode split-K heuristic: split when there are too few (sequence, kv head) programs to keep every
# SM busy with several programs; never split below _MIN_TOKENS_PER_SPLIT tokens per program.
_TARGET_PROGRAMS_PER_SM = 4
_MIN_TOKENS_PER_SPLIT = 256
_MAX_SPLITS = 32
# Tile sizes and warps, picked from register counts of sm_90 builds (no spills, several programs
# per SM for decode); benchmarks/gpu/kernel_bench.py sweeps them on a GPU.
DECODE_BLOCK_N = 32  # K/V tokens per decode loop step
DECODE_NUM_WARPS = 4
PREFILL_BLOCK_M = 64  # query rows per prefill program: BLOCK_Q tokens x GROUP_PAD heads
PREFILL_BLOCK_N = 64
PREFILL_NUM_WARPS = 8


@triton.jit
def _write_kv_cache_kernel(
    key_ptr, value_ptr, k_cache_ptr, v_cache_ptr, slot_mapping_ptr,
    stride_kt, stride_kh, stride_vt, stride_vh,
    stride_cb, stride_ct, stride_ch,
    NUM_KV_HEADS: tl.constexpr, HEADS_PAD: tl.constexpr, HEAD_DIM: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
):  # fmt: skip
    """One program per token: copy its [num_kv_heads, head_dim] K and V rows into its slot."""
    token = tl.program_id(0).to(tl.int64)
    slot = tl.load(slot_mapping_ptr + token).to(tl.int64)
    if slot < 0:  # NOTE: a negative slot marks a padding token (e.g. a padded CUDA-graph batch).
        return
    h = tl.arange(0, HEADS_PAD)[:, None]
    d = tl.arange(0, HEAD_DIM)[None, :]
    mask = h < NUM_KV_HEADS
    dst = (slot // BLOCK_SIZE) * stride_cb + (slot % BLOCK_SIZE) * stride_ct + h * stride_ch + d
    k = tl.load(key_ptr + token * stride_kt + h * stride_kh + d, mask=mask)
    tl.store(k_cache_ptr + dst, k, mask=mask)
    v = tl.load(value_ptr + token * stride_vt + h * stride_vh + d, mask=mask)
    tl.store(v_cache_ptr + dst, v, mask=mask)


@triton.jit
def _attend_tile(
    q, acc, m_i, l_i, n, valid, keep, table_row_ptr, k_cache_ptr, v_cache_ptr, kv_head,
    scale_log2, stride_cb, stride_ct, stride_ch,
    HEAD_DIM: tl.constexpr, BLOCK_SIZE: tl.constexpr, DOT_PRECISION: tl.constexpr,
    INT64_OFFSETS: tl.constexpr,
):  # fmt: skip
    """One online-softmax step over a tile of tokens n: `valid` [BLOCK_N] says which tokens exist
    (only those are loaded), `keep` [rows or 1, BLOCK_N] which ones each query row attends to."""
    block = tl.load(table_row_ptr + n // BLOCK_SIZE, mask=valid, other=0)
    if INT64_OFFSETS:  # NOTE: int32 offsets save registers; only caches of >= 2**31 elements pay
        block = block.to(tl.int64)
    row = block * stride_cb + (n % BLOCK_SIZE) * stride_ct + kv_head * stride_ch
    d = tl.arange(0, HEAD_DIM)
    # K is loaded transposed ([HEAD_DIM, BLOCK_N]) so the dot needs no layout change.
    k_t = tl.load(k_cache_ptr + row[None, :] + d[:, None], mask=valid[None, :], other=0.0)
    s = tl.dot(q, k_t, input_precision=DOT_PRECISION) * scale_log2
    s = tl.where(keep, s, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(s, 1))
    alpha = tl.exp2(m_i - m_new)
    p = tl.exp2(s - m_new[:, None])
    v = tl.load(v_cache_ptr + row[:, None] + d[None, :], mask=valid[:, None], other=0.0)
    acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=DOT_PRECISION)
    return acc, m_new, l_i * alpha + tl.sum(p, 1)


@triton.jit
def _paged_decode_kernel(
    out_ptr, q_ptr, k_cache_ptr, v_cache_ptr, block_tables_ptr, seq_lens_ptr,
    part_acc_ptr, part_max_ptr, part_sum_ptr, scale_log2, tokens_per_split,
    stride_qs, stride_qh, stride_os, stride_oh, stride_cb, stride_ct, stride_ch, stride_bt,
    GROUP: tl.constexpr, GROUP_PAD: tl.constexpr, HEAD_DIM: tl.constexpr,
    BLOCK_SIZE: tl.constexpr, BLOCK_N: tl.constexpr, SPLIT: tl.constexpr,
    DOT_PRECISION: tl.constexpr, INT64_OFFSETS: tl.constexpr,
):  # fmt: skip
    """One (sequence, kv head, split): the GROUP query heads of the kv head read K/V once.

    Without SPLIT the program covers the whole context and writes the normalised output; with
    SPLIT it covers tokens [split * tokens_per_split, ...) and writes its unnormalised partial
    state (acc, max, sum) for _merge_splits_kernel.
    """
    seq = tl.program_id(0)
    kv_head = tl.program_id(1)
    split = tl.program_id(2)
    seq_len = tl.load(seq_lens_ptr + seq)
    g = tl.arange(0, GROUP_PAD)
    d = tl.arange(0, HEAD_DIM)
    head = kv_head * GROUP + g
    q_offs = seq * stride_qs + head[:, None] * stride_qh + d[None, :]
    q = tl.load(q_ptr + q_offs, mask=(g < GROUP)[:, None], other=0.0)
    lo = 0
    hi = seq_len
    if SPLIT:
        lo = split * tokens_per_split
        hi = tl.minimum(lo + tokens_per_split, seq_len)
    m_i = tl.full([GROUP_PAD], float("-inf"), tl.float32)
    l_i = tl.zeros([GROUP_PAD], tl.float32)
    acc = tl.zeros([GROUP_PAD, HEAD_DIM], tl.float32)
    table_row_ptr = block_tables_ptr + seq.to(tl.int64) * stride_bt
    for start in range(lo, hi, BLOCK_N):
        n = start + tl.arange(0, BLOCK_N)
        valid = n < hi
        acc, m_i, l_i = _attend_tile(
            q, acc, m_i, l_i, n, valid, valid[None, :], table_row_ptr, k_cache_ptr, v_cache_ptr,
            kv_head, scale_log2, stride_cb, stride_ct, stride_ch,
            HEAD_DIM, BLOCK_SIZE, DOT_PRECISION, INT64_OFFSETS,
        )  # fmt: skip
    if SPLIT:
        part = (seq * (GROUP * tl.num_programs(1)) + head) * tl.num_programs(2) + split
        part_offs = part[:, None] * HEAD_DIM + d[None, :]
        tl.store(part_acc_ptr + part_offs, acc, mask=(g < GROUP)[:, None])
        tl.store(part_max_ptr + part, m_i, mask=g < GROUP)
        tl.store(part_sum_ptr + part, l_i, mask=g < GROUP)
    else:
        out = acc / l_i[:, None]
        o_offs = seq * stride_os + head[:, None] * stride_oh + d[None, :]
        tl.store(out_ptr + o_offs, out.to(out_ptr.dtype.element_ty), mask=(g < GROUP)[:, None])


@triton.jit
def _merge_splits_kernel(
    out_ptr, part_acc_ptr, part_max_ptr, part_sum_ptr, seq_lens_ptr, tokens_per_split,
    num_splits, stride_os, stride_oh,
    HEAD_DIM: tl.constexpr, SPLITS_PAD: tl.constexpr,
):  # fmt: skip
    """One (sequence, head): rescale the non-empty splits' partial states to a common max, sum."""
    seq = tl.program_id(0)
    head = tl.program_id(1)
    seq_len = tl.load(seq_lens_ptr + seq)
    sp = tl.arange(0, SPLITS_PAD)
    d = tl.arange(0, HEAD_DIM)
    # NOTE: splits past the sequence's end wrote (0, -inf, 0); they are masked out, not trusted.
    valid = (sp < tl.cdiv(seq_len, tokens_per_split)) & (sp < num_splits)
    part = (seq * tl.num_programs(1) + head) * num_splits + sp
    m = tl.load(part_max_ptr + part, mask=valid, other=float("-inf"))
    w = tl.where(valid, tl.exp2(m - tl.max(m, 0)), 0.0)
    l_sum = tl.sum(tl.load(part_sum_ptr + part, mask=valid, other=0.0) * w, 0)
    part_offs = part[:, None] * HEAD_DIM + d[None, :]
    acc = tl.load(part_acc_ptr + part_offs, mask=valid[:, None], other=0.0)
    out = tl.sum(acc * w[:, None], 0) / l_sum
    tl.store(out_ptr + seq * stride_os + head * stride_oh + d, out.to(out_ptr.dtype.element_ty))


@triton.jit
def _paged_prefill_kernel(
    out_ptr, q_ptr, k_cache_ptr, v_cache_ptr, block_tables_ptr, seq_lens_ptr, query_start_loc_ptr,
    scale_log2, stride_qt, stride_qh, stride_ot, stride_oh, stride_cb, stride_ct, stride_ch,
    stride_bt,
    GROUP: tl.constexpr, GROUP_PAD: tl.constexpr, HEAD_DIM: tl.constexpr,
    BLOCK_SIZE: tl.constexpr, BLOCK_Q: tl.constexpr, BLOCK_N: tl.constexpr,
    DOT_PRECISION: tl.constexpr, INT64_OFFSETS: tl.constexpr,
):  # fmt: skip
    """One (sequence, tile of BLOCK_Q query tokens, kv head), causal over the whole context.

    The tile's rows are (token, head of the kv group) pairs, so K/V are read once per group:
        row r  ->  token q_tile * BLOCK_Q + r // GROUP_PAD,  head kv_head * GROUP + r % GROUP_PAD
    Query token t sits at absolute position context_len + t and attends to positions <= it.
    """
    seq = tl.program_id(0)
    q_tile = tl.program_id(1)
    kv_head = tl.program_id(2)
    q_start = tl.load(query_start_loc_ptr + seq)
    query_len = tl.load(query_start_loc_ptr + seq + 1) - q_start
    if q_tile * BLOCK_Q >= query_len:
        return
    seq_len = tl.load(seq_lens_ptr + seq)
    context_len = seq_len - query_len
    r = tl.arange(0, BLOCK_Q * GROUP_PAD)
    token = q_tile * BLOCK_Q + r // GROUP_PAD
    g = r % GROUP_PAD
    head = kv_head * GROUP + g
    row_valid = (token < query_len) & (g < GROUP)
    d = tl.arange(0, HEAD_DIM)
    q_offs = (q_start + token).to(tl.int64)[:, None] * stride_qt + head[:, None] * stride_qh
    q = tl.load(q_ptr + q_offs + d[None, :], mask=row_valid[:, None], other=0.0)
    q_pos = context_len + token
    m_i = tl.full([BLOCK_Q * GROUP_PAD], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_Q * GROUP_PAD], tl.float32)
    acc = tl.zeros([BLOCK_Q * GROUP_PAD, HEAD_DIM], tl.float32)
    table_row_ptr = block_tables_ptr + seq.to(tl.int64) * stride_bt
    # The tile's last query sits at context_len + (q_tile + 1) * BLOCK_Q - 1 (or seq_len - 1).
    hi = tl.minimum(context_len + (q_tile + 1) * BLOCK_Q, seq_len)
    for start in range(0, hi, BLOCK_N):
        n = start + tl.arange(0, BLOCK_N)
        valid = n < hi
        keep = (n[None, :] <= q_pos[:, None]) & valid[None, :]
        acc, m_i, l_i = _attend_tile(
            q, acc, m_i, l_i, n, valid, keep, table_row_ptr, k_cache_ptr, v_cache_ptr, kv_head,
            scale_log2, stride_cb, stride_ct, stride_ch,
            HEAD_DIM, BLOCK_SIZE, DOT_PRECISION, INT64_OFFSETS,
        )  # fmt: skip
    out = acc / l_i[:, None]
    o_offs = (q_start + token).to(tl.int64)[:, None] * stride_ot + head[:, None] * stride_oh
    out_offs = o_offs + d[None, :]
    tl.store(out_ptr + out_offs, out.to(out_ptr.dtype.element_ty), mask=row_valid[:, None])


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
    _write_kv_cache_kernel[(num_tokens,)](
        key, value, k_cache, v_cache, slot_mapping,
        key.stride(0), key.stride(1), value.stride(0), value.stride(1),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        NUM_KV_HEADS=num_kv_heads, HEADS_PAD=triton.next_power_of_2(num_kv_heads),
        HEAD_DIM=head_dim, BLOCK_SIZE=block_size,
    )  # fmt: skip


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
    _paged_decode_kernel[grid](
        out, query, k_cache, v_cache, block_tables, seq_lens, part_acc, part_max, part_sum,
        scale * _LOG2_E, tokens_per_split,
        query.stride(0), query.stride(1), out.stride(0), out.stride(1),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2), block_tables.stride(0),
        GROUP=group, GROUP_PAD=max(16, triton.next_power_of_2(group)), HEAD_DIM=head_dim,
        BLOCK_SIZE=block_size, BLOCK_N=DECODE_BLOCK_N, SPLIT=split,
        DOT_PRECISION=_dot_precision(query.dtype), INT64_OFFSETS=_int64_offsets(k_cache),
        num_warps=DECODE_NUM_WARPS,
    )  # fmt: skip
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
    _merge_splits_kernel[(num_seqs, num_heads)](
        out, part_acc, part_max, part_sum, seq_lens, tokens_per_split, num_splits,
        out.stride(0), out.stride(1),
        HEAD_DIM=head_dim, SPLITS_PAD=triton.next_power_of_2(num_splits),
    )  # fmt: skip
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
    _paged_prefill_kernel[grid](
        out, query, k_cache, v_cache, block_tables, seq_lens, query_start_loc, scale * _LOG2_E,
        query.stride(0), query.stride(1), out.stride(0), out.stride(1),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2), block_tables.stride(0),
        GROUP=group, GROUP_PAD=group_pad, HEAD_DIM=head_dim, BLOCK_SIZE=block_size,
        BLOCK_Q=block_q, BLOCK_N=PREFILL_BLOCK_N, DOT_PRECISION=_dot_precision(query.dtype),
        INT64_OFFSETS=_int64_offsets(k_cache), num_warps=PREFILL_NUM_WARPS,
    )  # fmt: skip
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
    ) -> torch.Tensor:
        write_kv_cache_triton(key, value, k_cache, v_cache, meta.slot_mapping)
        out = torch.empty_like(query)
        nd = meta.num_decodes
        if nd:
            paged_decode_attention_triton(
                query[:nd], k_cache, v_cache, meta.block_tables[:nd], meta.seq_lens[:nd],
                meta.max_seq_len, scale, out=out[:nd],
            )  # fmt: skip
        if meta.num_seqs > nd:
            paged_prefill_attention_triton(
                query, k_cache, v_cache, meta.block_tables[nd:], meta.seq_lens[nd:],
                meta.query_start_loc[nd:], meta.max_query_len, scale, out=out,
            )  # fmt: skip
        return out
