"""How many KV blocks the pool holds: from --num-kv-blocks, else from the memory budget.

With tensor parallelism each rank holds every block for its own KV heads only, so the budget
(--kv-cache-memory) is per rank, and the pool is the smallest any rank can afford: the block
tables are shared, so every rank must hold the same blocks.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from engine.config import DEFAULT_CPU_KV_CACHE_MEMORY, EngineConfig
from engine.model_config import ModelConfig
from engine.worker.model_runner import kv_cache_bytes_per_block
from pagedock.errors import ConfigError

if TYPE_CHECKING:
    from engine.distributed.tp_group import TPGroup


def pick_num_kv_blocks(
    config: EngineConfig,
    model_config: ModelConfig,
    max_model_len: int,
    kv_dtype: torch.dtype,
    device: torch.device,
    num_kv_heads: int,
    tp: TPGroup | None = None,
) -> int:
    """The pool size every rank agrees on, at the KV cache's own element size (a bf16 cache fits
    twice the blocks of a float32 one); ConfigError when one max_model_len sequence won't fit."""
    num_blocks = config.num_kv_blocks
    if num_blocks is None:
        num_blocks = _blocks_that_fit(
            config, model_config, max_model_len, kv_dtype, device, num_kv_heads
        )
    if tp is not None:
        num_blocks = tp.min_over_ranks(num_blocks)
    bs = config.block_size
    needed = -(-max_model_len // bs)
    if num_blocks < needed:
        raise ConfigError(
            f"the KV cache holds {num_blocks} blocks of {bs} tokens ({num_blocks * bs} tokens), "
            f"fewer than one sequence of max_model_len {max_model_len} needs ({needed} "
            "blocks); lower max_model_len or give the cache more memory"
        )
    return num_blocks


def _blocks_that_fit(
    config: EngineConfig,
    model_config: ModelConfig,
    max_model_len: int,
    kv_dtype: torch.dtype,
    device: torch.device,
    num_kv_heads: int,
) -> int:
    bs = config.block_size
    budget = config.kv_cache_memory or DEFAULT_CPU_KV_CACHE_MEMORY
    if config.kv_cache_memory is None and device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        budget = int(free * 0.9)
    assert isinstance(budget, int)
    per_block = kv_cache_bytes_per_block(model_config, bs, kv_dtype, num_kv_heads)
    # No point holding more than max_num_seqs full-length sequences.
    return min(budget // per_block, config.max_num_seqs * -(-max_model_len // bs) + 1)
