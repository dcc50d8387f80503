"""A step's attention metadata built by hand, for the attention backends' tests."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from engine.attention.backend import AttentionMetadata
from engine.attention.torch_attention import TorchAttentionBackend


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def make_block_tables(
    seq_lens: list[int], block_size: int, gen: torch.Generator, device: str = "cpu"
) -> tuple[torch.Tensor, int]:
    """Shuffled physical blocks per sequence, padded with 0 (one spare column); (table, pool
    size)."""
    needed = [cdiv(n, block_size) for n in seq_lens]
    num_blocks = sum(needed) + 3
    free = torch.randperm(num_blocks, generator=gen).tolist()
    table = torch.zeros(len(seq_lens), max(needed) + 1, dtype=torch.int32)
    for s, n in enumerate(needed):
        table[s, :n] = torch.tensor([free.pop() for _ in range(n)], dtype=torch.int32)
    return table.to(device), num_blocks


def attention_metadata(
    query_lens: list[int],
    seq_lens: list[int],
    block_size: int,
    gen: torch.Generator,
    device: str = "cpu",
) -> tuple[AttentionMetadata, int]:
    """A step's metadata (decodes are the leading query_len == 1 sequences); (meta, pool size)."""
    block_tables, num_blocks = make_block_tables(seq_lens, block_size, gen, device)
    starts = [0]
    for n in query_lens:
        starts.append(starts[-1] + n)
    slots = []
    for s, (q_len, seq_len) in enumerate(zip(query_lens, seq_lens, strict=True)):
        for pos in range(seq_len - q_len, seq_len):
            slots.append(int(block_tables[s, pos // block_size]) * block_size + pos % block_size)
    num_decodes = next((i for i, n in enumerate(query_lens) if n != 1), len(query_lens))
    meta = AttentionMetadata(
        num_tokens=starts[-1],
        num_seqs=len(seq_lens),
        num_decodes=num_decodes,
        slot_mapping=torch.tensor(slots, dtype=torch.int64, device=device),
        query_start_loc=torch.tensor(starts, dtype=torch.int32, device=device),
        seq_lens=torch.tensor(seq_lens, dtype=torch.int32, device=device),
        block_tables=block_tables,
        max_query_len=max(query_lens),
        max_seq_len=max(seq_lens),
        query_start_loc_cpu=starts,
        seq_lens_cpu=list(seq_lens),
    )
    return meta, num_blocks


@dataclass
class MixedStep:
    """Decodes, a fresh prompt, a chunk over a cached prefix and a long chunk in one step: 8
    query heads over 2 KV heads of 64 dims, blocks of 16, random float32 K/V in the pool."""

    meta: AttentionMetadata
    query: torch.Tensor
    key: torch.Tensor
    value: torch.Tensor
    k_cache: torch.Tensor
    v_cache: torch.Tensor


def mixed_step(seed: int = 9) -> MixedStep:
    gen = torch.Generator().manual_seed(seed)
    query_lens, seq_lens = [1, 1, 1, 9, 16, 37], [1, 49, 100, 9, 21, 37 + 64]
    meta, num_blocks = attention_metadata(query_lens, seq_lens, 16, gen)
    k_cache, v_cache = torch.randn(2, num_blocks, 16, 2, 64, generator=gen)
    qkv = torch.randn(meta.num_tokens, 8 + 2 + 2, 64, generator=gen)
    query, key, value = qkv.split([8, 2, 2], dim=1)
    return MixedStep(meta, query, key, value, k_cache, v_cache)


def forward_both_backends(
    step: MixedStep, k_cache: torch.Tensor, v_cache: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """The step through the C++ kernels over (k_cache, v_cache), and through pure torch over a
    copy of them; asserts both left the same cache bytes. Returns (kernels' out, torch's out)."""
    expected_k, expected_v = k_cache.clone(), v_cache.clone()
    args = (step.query, step.key, step.value)
    expected = TorchAttentionBackend(use_cpu_kernels=False).forward(
        *args, expected_k, expected_v, step.meta, 0.125
    )
    out = TorchAttentionBackend().forward(*args, k_cache, v_cache, step.meta, 0.125)
    assert torch.equal(k_cache, expected_k) and torch.equal(v_cache, expected_v)
    return out, expected
