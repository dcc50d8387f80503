"""The Triton kernels of the GPU attention backend (the wrappers that launch them are in
`engine.attention.triton_attention`, whose docstring describes the layout; the shape checks and
grids they launch with, in `engine.attention.triton_launch`).
"""

from __future__ import annotations

try:
    import triton
    import triton.language as tl
except ImportError as e:  # pragma: no cover - exercised by a subprocess test
    raise ImportError(
        "the 'triton' attention backend needs the triton package "
        "(pip install 'pagedock[gpu]'); use the 'torch' backend without it"
    ) from e

LOG2_E = 1.4426950408889634
# Tile sizes and warps, picked from register counts of sm_90 builds (no spills, several programs
# per SM for decode); benchmarks/gpu/kernel_bench.py sweeps them on a GPU.
DECODE_BLOCK_N = 32  # K/V tokens per decode loop step
DECODE_NUM_WARPS = 4
PREFILL_BLOCK_M = 64  # query rows per prefill program: BLOCK_Q tokens x GROUP_PAD heads
PREFILL_BLOCK_N = 64
PREFILL_NUM_WARPS = 8


@triton.jit
def write_kv_cache_kernel(
    key_ptr,
    value_ptr,
    k_cache_ptr,
    v_cache_ptr,
    slot_mapping_ptr,
    stride_kt,
    stride_kh,
    stride_vt,
    stride_vh,
    stride_cb,
    stride_ct,
    stride_ch,
    NUM_KV_HEADS: tl.constexpr,
    HEADS_PAD: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
):
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
def attend_tile(
    q,
    acc,
    m_i,
    l_i,
    n,
    valid,
    keep,
    table_row_ptr,
    k_cache_ptr,
    v_cache_ptr,
    kv_head,
    scale_log2,
    stride_cb,
    stride_ct,
    stride_ch,
    HEAD_DIM: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
    INT64_OFFSETS: tl.constexpr,
):
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
def paged_decode_kernel(
    out_ptr,
    q_ptr,
    k_cache_ptr,
    v_cache_ptr,
    block_tables_ptr,
    seq_lens_ptr,
    part_acc_ptr,
    part_max_ptr,
    part_sum_ptr,
    scale_log2,
    tokens_per_split,
    stride_qs,
    stride_qh,
    stride_os,
    stride_oh,
    stride_cb,
    stride_ct,
    stride_ch,
    stride_bt,
    GROUP: tl.constexpr,
    GROUP_PAD: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
    BLOCK_N: tl.constexpr,
    SPLIT: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
    INT64_OFFSETS: tl.constexpr,
):
    """One (sequence, kv head, split): the GROUP query heads of the kv head read K/V once.

    Without SPLIT the program covers the whole context and writes the normalised output; with
    SPLIT it covers tokens [split * tokens_per_split, ...) and writes its unnormalised partial
    state (acc, max, sum) for merge_splits_kernel.
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
        acc, m_i, l_i = attend_tile(
            q,
            acc,
            m_i,
            l_i,
            n,
            valid,
            valid[None, :],
            table_row_ptr,
            k_cache_ptr,
            v_cache_ptr,
            kv_head,
            scale_log2,
            stride_cb,
            stride_ct,
            stride_ch,
            HEAD_DIM,
            BLOCK_SIZE,
            DOT_PRECISION,
            INT64_OFFSETS,
        )
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
def merge_splits_kernel(
    out_ptr,
    part_acc_ptr,
    part_max_ptr,
    part_sum_ptr,
    seq_lens_ptr,
    tokens_per_split,
    num_splits,
    stride_os,
    stride_oh,
    HEAD_DIM: tl.constexpr,
    SPLITS_PAD: tl.constexpr,
):
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
def paged_prefill_kernel(
    out_ptr,
    q_ptr,
    k_cache_ptr,
    v_cache_ptr,
    block_tables_ptr,
    seq_lens_ptr,
    query_start_loc_ptr,
    scale_log2,
    stride_qt,
    stride_qh,
    stride_ot,
    stride_oh,
    stride_cb,
    stride_ct,
    stride_ch,
    stride_bt,
    GROUP: tl.constexpr,
    GROUP_PAD: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
    BLOCK_Q: tl.constexpr,
    BLOCK_N: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
    INT64_OFFSETS: tl.constexpr,
):
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
        acc, m_i, l_i = attend_tile(
            q,
            acc,
            m_i,
            l_i,
            n,
            valid,
            keep,
            table_row_ptr,
            k_cache_ptr,
            v_cache_ptr,
            kv_head,
            scale_log2,
            stride_cb,
            stride_ct,
            stride_ch,
            HEAD_DIM,
            BLOCK_SIZE,
            DOT_PRECISION,
            INT64_OFFSETS,
        )
    out = acc / l_i[:, None]
    o_offs = (q_start + token).to(tl.int64)[:, None] * stride_ot + head[:, None] * stride_oh
    out_offs = o_offs + d[None, :]
    tl.store(out_ptr + out_offs, out.to(out_ptr.dtype.element_ty), mask=row_valid[:, None])
