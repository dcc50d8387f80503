"""Paged attention in plain torch: the CPU path, and the reference the Triton kernels are tested
against.

The cache may hold K/V in a narrower dtype than the activations (a bf16 or int8 cache under float32
on the CPU, EngineConfig.kv_cache_dtype): writes round into the cache's dtype (int8: kv_quant.py),
and attention always reads the K/V as the cache holds them, widened back to the query's dtype."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from engine.attention.backend import AttentionMetadata
from engine.attention.kv_quant import dequantize_rows, quantize_rows
from pagedock.speculative_config import MAX_NUM_SPECULATIVE_TOKENS


def write_kv_cache(
    key: torch.Tensor,
    value: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
) -> None:
    """Scatter the step's K/V ([num_tokens, num_kv_heads, head_dim]) into their slots, rounded
    to the cache's dtype (round-to-nearest-even for bf16, quantised rows for int8)."""
    num_blocks, block_size, num_kv_heads, width = k_cache.shape
    flat_shape = (num_blocks * block_size, num_kv_heads, width)
    k_cache.view(flat_shape).index_copy_(0, slot_mapping, _as_stored(key, k_cache))
    v_cache.view(flat_shape).index_copy_(0, slot_mapping, _as_stored(value, v_cache))


def _as_stored(x: torch.Tensor, cache: torch.Tensor) -> torch.Tensor:
    return quantize_rows(x) if cache.dtype == torch.int8 else x.to(cache.dtype)


def _widened(rows: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return dequantize_rows(rows, dtype) if rows.dtype == torch.int8 else rows.to(dtype)


def as_cached(x: torch.Tensor, cache: torch.Tensor) -> torch.Tensor:
    """`x` as the cache stores it (rounded to its dtype), back in x's dtype: what a later read of
    the cache would give. No copy when the dtypes agree."""
    return x if cache.dtype == x.dtype else _widened(_as_stored(x, cache), x.dtype)


def gather_kv(
    cache: torch.Tensor, block_tables: torch.Tensor, num_blocks: int, dtype: torch.dtype
) -> torch.Tensor:
    """[num_seqs, num_blocks * block_size, num_kv_heads, head_dim] in `dtype`: each sequence's
    first slots (a bf16 or int8 cache's gathered rows widened; no extra copy when the dtypes
    agree)."""
    blocks = cache[block_tables[:, :num_blocks].long()]  # [S, nb, bs, H, D (+4 for int8)]
    num_seqs, nb, bs, heads, width = blocks.shape
    return _widened(blocks.view(num_seqs, nb * bs, heads, width), dtype)


def paged_decode_attention(
    query: torch.Tensor,  # [num_seqs, num_heads, head_dim]
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    max_seq_len: int,
    scale: float,
) -> torch.Tensor:
    """One query token per sequence, batched: keys beyond each sequence's length are masked."""
    num_seqs, num_heads, head_dim = query.shape
    block_size, num_kv_heads = k_cache.shape[1], k_cache.shape[2]
    num_blocks = (max_seq_len + block_size - 1) // block_size
    # [S, Hkv, L, D] in the query's dtype.
    keys = gather_kv(k_cache, block_tables, num_blocks, query.dtype).transpose(1, 2)
    values = gather_kv(v_cache, block_tables, num_blocks, query.dtype).transpose(1, 2)
    # GQA: the group of query heads sharing a KV head becomes SDPA's "query length".
    group = num_heads // num_kv_heads
    q = query.view(num_seqs, num_kv_heads, group, head_dim)
    positions = torch.arange(keys.shape[2], device=query.device)
    mask = (positions[None, :] < seq_lens[:, None].to(positions.dtype)).view(num_seqs, 1, 1, -1)
    out = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, scale=scale)
    return out.reshape(num_seqs, num_heads, head_dim)


def prefill_attention_one(
    query: torch.Tensor,  # [query_len, num_heads, head_dim]
    keys: torch.Tensor,  # [seq_len, num_kv_heads, head_dim]: cached prefix + this step's tokens
    values: torch.Tensor,
    scale: float,
) -> torch.Tensor:
    """Causal attention of a chunk of queries that sit at the end of a sequence."""
    query_len, seq_len = query.shape[0], keys.shape[0]
    q = query.transpose(0, 1).unsqueeze(0)  # [1, H, Lq, D]
    k = keys.transpose(0, 1).unsqueeze(0)
    v = values.transpose(0, 1).unsqueeze(0)
    gqa = q.shape[1] != k.shape[1]
    if query_len == seq_len:
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale, enable_gqa=gqa)
    else:
        # Query i sits at absolute position (seq_len - query_len + i).
        q_pos = torch.arange(seq_len - query_len, seq_len, device=query.device)
        k_pos = torch.arange(seq_len, device=query.device)
        mask = k_pos[None, :] <= q_pos[:, None]
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale, enable_gqa=gqa)
    return out.squeeze(0).transpose(0, 1)


def paged_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    meta: AttentionMetadata,
    scale: float,
) -> torch.Tensor:
    """Attention for a whole step whose K/V are already in the cache (reference semantics)."""
    out = torch.empty_like(query)
    nd = meta.num_decodes
    if nd:
        out[:nd] = paged_decode_attention(
            query[:nd],
            k_cache,
            v_cache,
            meta.block_tables[:nd],
            meta.seq_lens[:nd],
            max(meta.seq_lens_cpu[:nd]),
            scale,
        )
    _prefill_attention(query, key, value, k_cache, v_cache, meta, scale, out)
    return out


def _prefill_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    meta: AttentionMetadata,
    scale: float,
    out: torch.Tensor,
    seqs: list[int] | None = None,
) -> None:
    """Sequences after the decodes (or `seqs`), one at a time through SDPA."""
    block_size = k_cache.shape[1]
    starts, seq_lens = meta.query_start_loc_cpu, meta.seq_lens_cpu
    for s in range(meta.num_decodes, meta.num_seqs) if seqs is None else seqs:
        begin, end, seq_len = starts[s], starts[s + 1], seq_lens[s]
        if end - begin == seq_len:
            # No cached prefix: the step's own K/V are the whole context; skip the gather (but
            # see them as the cache holds them, so that every path attends to the same K/V).
            keys, values = as_cached(key[begin:end], k_cache), as_cached(value[begin:end], v_cache)
        else:
            num_blocks = (seq_len + block_size - 1) // block_size
            table = meta.block_tables[s : s + 1]
            keys = gather_kv(k_cache, table, num_blocks, query.dtype)[0, :seq_len]
            values = gather_kv(v_cache, table, num_blocks, query.dtype)[0, :seq_len]
        out[begin:end] = prefill_attention_one(query[begin:end], keys, values, scale)


class TorchAttentionBackend:
    """The CPU backend: with the C++ kernels (float32 activations; a float32, bf16 or int8
    cache) the step's K/V are scattered and every row of short contexts attends through the paged
    kernel, long prefills through SDPA over gathered blocks; without them, all in torch."""

    name = "torch"

    def __init__(self, use_cpu_kernels: bool = True) -> None:
        self.cpu_kernels = None
        if use_cpu_kernels:
            from engine.kernels.cpu_kernels import load_cpu_kernels

            self.cpu_kernels = load_cpu_kernels()

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
        kernels = self.cpu_kernels if self._kernel_fits(query, k_cache) else None
        if kernels is not None:
            kernels.write_kv_cache(key, value, k_cache, v_cache, meta.slot_mapping)
        else:
            write_kv_cache(key, value, k_cache, v_cache, meta.slot_mapping)
        if kernels is None:
            out = paged_attention(query, key, value, k_cache, v_cache, meta, scale)
            return out if out_dtype is None else out.to(out_dtype)
        # The kernel writes float32 or bf16 (rounded as a cast would); SDPA's rows below are
        # cast as they are copied in.
        kernel_out = out_dtype if out_dtype in (torch.float32, torch.bfloat16) else query.dtype
        out = torch.empty(query.shape, dtype=kernel_out, device=query.device)
        # Every query row, prefill rows of short contexts too, as a one-token "decode" over its
        # own causal context (its K/V are in the cache already); long prefills through SDPA.
        # query may be a strided view into the QKV projection: the kernel reads it in place.
        tables, seq_lens, long_prefills = per_token_context(meta)
        kernels.paged_decode(query, k_cache, v_cache, tables, seq_lens, scale, out)
        if long_prefills:
            _prefill_attention(query, key, value, k_cache, v_cache, meta, scale, out, long_prefills)
        return out if out_dtype is None else out.to(out_dtype)

    def _kernel_fits(self, query: torch.Tensor, k_cache: torch.Tensor) -> bool:
        return (
            self.cpu_kernels is not None
            and query.device.type == "cpu"
            and query.dtype == torch.float32
            and k_cache.dtype in (torch.float32, torch.bfloat16, torch.int8)
            and self.cpu_kernels.supports(query.shape[2], query.shape[1] // k_cache.shape[2])
        )


# Above this context a prefill row's keys no longer stay in cache across the rows of its chunk,
# and SDPA's tiled GEMMs (which read each K/V tile once per block of queries) win. Below it the
# per-row kernel was faster: workload A's prefills (32-512 tokens) 8 % faster end to end.
PER_ROW_PREFILL_MAX_CONTEXT = 2048
# Rows of one sequence in a step that go through the per-row kernel at any context: a speculative
# verification pass (num_speculative_tokens + 1 rows) must give each row the bits a one-row decode
# step gives it, and SDPA sums in another order. Longer chunks of long contexts go through SDPA.
PER_ROW_MAX_QUERY_LEN = MAX_NUM_SPECULATIVE_TOKENS + 1


def per_token_context(meta: AttentionMetadata) -> tuple[torch.Tensor, torch.Tensor, list[int]]:
    """Each query row's block table and causal context length ([num_tokens, max_blocks] and
    [num_tokens], int32), and the prefill sequences left to SDPA (their rows get length 0).

    A sequence's table is repeated for each of its rows, and row i of a sequence whose step
    computes its last q tokens sees seq_len - q + i + 1 positions. Computed once per step and
    kept on the metadata (every layer asks)."""
    if meta.num_tokens == meta.num_seqs:
        # Decodes only: the rows are the sequences. The live tensors, not a derived copy, so
        # that a replayed CUDA graph's buffers (engine/worker/cuda_graph_runner.py) are read as
        # updated.
        return meta.block_tables.contiguous(), meta.seq_lens.contiguous(), []
    cached = meta.backend_cache.get("per_token_context")
    if cached is None:
        starts = torch.tensor(meta.query_start_loc_cpu)
        query_lens = starts[1:] - starts[:-1]
        context = torch.tensor(meta.seq_lens_cpu)
        long_prefill = (query_lens > PER_ROW_MAX_QUERY_LEN) & (
            context > PER_ROW_PREFILL_MAX_CONTEXT
        )
        seq_index = torch.repeat_interleave(torch.arange(meta.num_seqs), query_lens)
        offset_in_seq = torch.arange(meta.num_tokens) - starts[:-1][seq_index]
        first = context - query_lens  # context before the step
        lens = (first[seq_index] + offset_in_seq + 1).masked_fill_(long_prefill[seq_index], 0)
        tables = meta.block_tables.index_select(0, seq_index.to(meta.block_tables.device))
        cached = (
            tables.contiguous(),
            lens.to(torch.int32).to(meta.block_tables.device),
            long_prefill.nonzero().flatten().tolist(),
        )
        meta.backend_cache["per_token_context"] = cached
    return cached
