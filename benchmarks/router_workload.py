"""The pure parts of the SmolLM2 router scenario (benchmarks/router_smollm2.py): the multi-tenant,
multi-turn chat workload, the seeded arrival schedule, the KV capacity it is given, and the
percentile and goodput arithmetic. No processes, no clock: unit-tested in
tests/benchmarks/test_router_workload.py.

The workload is chat messages, not token ids, so the router's own chat hashing (render the
template, encode, hash full blocks) is on the measured path exactly as a chat client drives it.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

_VOCABULARY = """paged attention block cache prefix tenant router engine replica token batch stream
kernel memory schedule latency policy cluster service prompt invoice refund shipment warranty
account password contract delivery support manual release upgrade backup network storage"""
WORDS = _VOCABULARY.split()

Messages = list[dict[str, str]]


@dataclass
class ChatTurn:
    """One request: a user turn of one conversation, carrying that conversation's earlier turns."""

    tenant: int
    conversation: int
    turn: int
    messages: Messages
    token_ids: list[int] = field(repr=False)
    """The prompt as the engine renders it (chat template, no special tokens added)."""


@dataclass
class WorkloadShape:
    num_tenants: int = 8
    conversations_per_tenant: int = 4
    turns_per_conversation: int = 4
    system_prompt_tokens: int = 1000
    """Each tenant's system prompt, in tokens of the model's tokenizer (at least this many)."""
    user_words: int = 8
    assistant_words: int = 20
    """Earlier assistant replies carried in the history: about max_tokens long."""

    @property
    def num_requests(self) -> int:
        return self.num_tenants * self.conversations_per_tenant * self.turns_per_conversation


def system_prompts(
    encode: Callable[[str], list[int]], rng: random.Random, num_tenants: int, min_tokens: int
) -> list[str]:
    """Distinct system prompts of at least `min_tokens` tokens each. The tenant's name comes
    first, so no two tenants share even their first KV block."""
    prompts = []
    for tenant in range(num_tenants):
        text = f"You are the assistant of tenant {tenant}. Follow these rules:"
        while len(encode(text)) < min_tokens:
            text += " " + " ".join(rng.choice(WORDS) for _ in range(32))
        prompts.append(text)
    return prompts


def chat_turns(
    encode: Callable[[str], list[int]],
    render: Callable[[Messages], list[int]],
    shape: WorkloadShape,
    seed: int,
) -> list[ChatTurn]:
    """Every turn of every conversation, in request order: conversations interleaved at random,
    each one's turns in order (turn k carries turns 0..k-1, their replies included)."""
    rng = random.Random(seed)
    systems = system_prompts(encode, rng, shape.num_tenants, shape.system_prompt_tokens)
    conversations = [
        _conversation(systems[t], t, c, shape, rng, render)
        for t in range(shape.num_tenants)
        for c in range(shape.conversations_per_tenant)
    ]
    order = [i for i, conv in enumerate(conversations) for _ in conv]
    rng.shuffle(order)  # which conversation speaks next; each keeps its own turn order
    cursors = [0] * len(conversations)
    turns = []
    for i in order:
        turns.append(conversations[i][cursors[i]])
        cursors[i] += 1
    return turns


def _conversation(
    system: str,
    tenant: int,
    conversation: int,
    shape: WorkloadShape,
    rng: random.Random,
    render: Callable[[Messages], list[int]],
) -> list[ChatTurn]:
    history: Messages = [{"role": "system", "content": system}]
    turns = []
    for k in range(shape.turns_per_conversation):
        question = f"User {conversation} asks {k}: " + _words(rng, shape.user_words) + "?"
        messages = [*history, {"role": "user", "content": question}]
        turns.append(ChatTurn(tenant, conversation, k, messages, render(messages)))
        # The reply a later turn carries is fixed text, not what the model said, so the workload
        # (and every policy's prompts) is the same whatever the engines generate.
        reply = f"Answer {k}: " + _words(rng, shape.assistant_words) + "."
        history = [*messages, {"role": "assistant", "content": reply}]
    return turns


def _words(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


def poisson_arrivals(rate_per_s: float, num_requests: int, seed: int) -> list[float]:
    """Arrival offsets in seconds (the first at 0) of a Poisson process at `rate_per_s`. The
    same seed gives the same schedule shape at any rate (unit-rate gaps scaled by 1/rate)."""
    if rate_per_s <= 0:
        raise ValueError(f"arrival rate must be positive, got {rate_per_s}")
    rng = random.Random(seed)
    offsets, now = [], 0.0
    for _ in range(num_requests):
        offsets.append(now)
        now += rng.expovariate(1.0) / rate_per_s
    return offsets


@dataclass
class KvSizing:
    num_kv_blocks: int
    prefix_blocks: int
    tail_blocks: int
    reasoning: str

    @property
    def max_model_len(self) -> int:
        """The engines' context length: the longest request, whole blocks (the engine refuses a
        pool that cannot hold one sequence of max_model_len)."""
        return (self.prefix_blocks + self.tail_blocks) * self.block_size

    block_size: int = 16


def kv_sizing(
    turns: Sequence[ChatTurn],
    num_prefix_tokens: int,
    max_tokens: int,
    in_flight_per_replica: int,
    block_size: int = 16,
) -> KvSizing:
    """Blocks per replica: half the tenants' system prompts plus the working set of requests in
    flight. Enough for a replica that serves half the tenants (what prefix-aware routing gives
    it) to keep their prefixes; too few for one that serves all of them (round-robin)."""
    num_tenants = len({t.tenant for t in turns})
    prefix_blocks = num_prefix_tokens // block_size  # full blocks only are cached
    longest = max(len(t.token_ids) for t in turns) + max_tokens
    tail_blocks = math.ceil(longest / block_size) - prefix_blocks
    num_blocks = math.ceil(num_tenants / 2) * prefix_blocks + in_flight_per_replica * tail_blocks
    reasoning = (
        f"ceil({num_tenants} tenants / 2) x {prefix_blocks} system-prompt blocks + "
        f"{in_flight_per_replica} requests in flight x {tail_blocks} blocks of the longest "
        f"request beyond its system prompt (history, question, {max_tokens} output tokens): one "
        f"replica holds about half the tenants' prefixes plus the working set, so round-robin, "
        f"which shows every tenant to every replica, must evict while prefix-aware need not"
    )
    return KvSizing(num_blocks, prefix_blocks, tail_blocks, reasoning, block_size)


def common_prefix_tokens(turns: Sequence[ChatTurn]) -> int:
    """Tokens every turn of a tenant shares with that tenant's other turns (its system prompt as
    rendered), the smallest over tenants."""
    by_tenant: dict[int, list[int]] = {}
    for t in turns:
        seen = by_tenant.setdefault(t.tenant, t.token_ids)
        by_tenant[t.tenant] = seen[: common_prefix_length(seen, t.token_ids)]
    return min(len(ids) for ids in by_tenant.values())


def common_prefix_length(a: Sequence[int], b: Sequence[int]) -> int:
    """How many leading token ids `a` and `b` share."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile; NaN for no values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q / 100 * len(ordered)) - 1))]


def goodput_share(ttfts_s: Sequence[float | None], target_s: float) -> float:
    """Share of all requests answered with a first token within `target_s`; a request that failed
    or was rejected (None) counts against it."""
    if not ttfts_s:
        return float("nan")
    return sum(1 for t in ttfts_s if t is not None and t <= target_s) / len(ttfts_s)


def ttft_target_s(unloaded_hit_ttfts_s: Sequence[float], factor: float = 2.0) -> float:
    """The goodput target: `factor` x the median TTFT of a prefix-cache hit on an idle replica,
    i.e. what a warm tenant's user gets when nothing is queued, with room for one more such
    prefill ahead of it."""
    if not unloaded_hit_ttfts_s:
        raise ValueError("no unloaded hit TTFT measured")
    return factor * percentile(unloaded_hit_ttfts_s, 50)


def as_dict(shape: WorkloadShape) -> dict[str, Any]:
    return {**shape.__dict__, "num_requests": shape.num_requests}
