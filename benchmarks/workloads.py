"""The standard workloads, seeded so every system in a run sees the same requests."""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(frozen=True)
class Workload:
    name: str
    prompts: list[list[int]]
    max_tokens: int

    @property
    def num_prompt_tokens(self) -> int:
        return sum(len(p) for p in self.prompts)

    @property
    def num_generated_tokens(self) -> int:
        return len(self.prompts) * self.max_tokens


def workload_a(
    vocab_size: int, num_requests: int = 64, seed: int = 0, content_seed: int | None = None
) -> Workload:
    """Workload A: 64 requests, synthetic prompts of 32-512 tokens, exactly 128 generated each
    (greedy, ignore_eos). Token ids avoid the first 100 (special tokens live there).

    `seed` fixes the prompt lengths; `content_seed` (default: the same) the token ids. Repeat
    runs against one server vary the content only, so they miss its prefix cache but do exactly
    the same amount of work as the offline run."""
    return synthetic_workload("A", vocab_size, num_requests, (32, 512), 128, seed, content_seed)


def synthetic_workload(
    name: str,
    vocab_size: int,
    num_requests: int,
    prompt_len_range: tuple[int, int],
    max_tokens: int,
    seed: int = 0,
    content_seed: int | None = None,
) -> Workload:
    """Random token-id prompts with lengths uniform in `prompt_len_range` (both ends included),
    `max_tokens` generated each (greedy, ignore_eos); seeds as workload_a's."""
    rng = random.Random(seed)
    low = min(100, vocab_size // 4)
    shortest, longest = prompt_len_range
    prompts = [
        [rng.randrange(low, vocab_size) for _ in range(rng.randint(shortest, longest))]
        for _ in range(num_requests)
    ]
    if content_seed is not None:
        content = random.Random(content_seed)
        prompts = [[content.randrange(low, vocab_size) for _ in p] for p in prompts]
    return Workload(name, prompts, max_tokens=max_tokens)


def shared_prefix_workload(
    vocab_size: int, num_requests: int = 32, prefix_len: int = 400, seed: int = 0
) -> Workload:
    """32 requests sharing a 400-token prefix, each with a short unique tail, 32 new tokens."""
    rng = random.Random(seed)
    low = min(100, vocab_size // 4)
    prefix = [rng.randrange(low, vocab_size) for _ in range(prefix_len)]
    prompts = [
        prefix + [rng.randrange(low, vocab_size) for _ in range(rng.randint(8, 24))]
        for _ in range(num_requests)
    ]
    return Workload("shared-prefix", prompts, max_tokens=32)


def shared_first_blocks(
    warmup: list[list[int]], measured: list[list[int]], block_size: int
) -> list[int]:
    """Indices of measured prompts whose first block also starts a warm-up prompt. A prefix
    cache keys a block by its tokens and every block before it, so a prompt that shares no first
    block with the warm-up shares no block at all; check with the smallest block size in play."""
    if block_size < 1:
        raise ValueError(f"block_size must be positive, got {block_size}")
    warm = {tuple(p[:block_size]) for p in warmup if len(p) >= block_size}
    return [i for i, p in enumerate(measured) if tuple(p[:block_size]) in warm]


def check_no_shared_block(
    warmup: list[list[int]], measured: list[list[int]], block_size: int
) -> None:
    """Raise when a warm-up prompt would leave a measured prompt a prefix-cache hit."""
    shared = shared_first_blocks(warmup, measured, block_size)
    if shared:
        raise ValueError(
            f"warm-up prompts share their first {block_size}-token block with measured prompts "
            f"{shared[:10]}: the measured run would hit the prefix cache"
        )
