"""The multi-tenant workload: tenants with distinct long system prompts, many short user turns,
in random order; and the best prefix-cache hit count any routing could reach on it."""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass
from typing import Any

import httpx

from benchmarks.router_workload import common_prefix_length
from tests.router.live import system_prompt


@dataclass
class Turn:
    tenant: int
    body: dict[str, Any]
    token_ids: list[int]


def tenant_turns(
    tokenizer: Any,
    seed: int,
    num_tenants: int = 8,
    turns_per_tenant: int = 12,
    prefix_blocks: int = 10,
    block_size: int = 16,
) -> list[Turn]:
    rng = random.Random(seed)
    systems = [
        system_prompt(tokenizer, rng, prefix_blocks * block_size) for _ in range(num_tenants)
    ]
    turns = []
    for tenant, system in enumerate(systems):
        for i in range(turns_per_tenant):
            user = f"question {i}: " + " ".join(rng.choice(systems[0].split()) for _ in range(4))
            messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
            text = tokenizer.apply_chat_template(messages, True, tokenize=False)
            ids = tokenizer.encode(text, add_special_tokens=False)
            body = {"messages": messages, "max_tokens": 2, "temperature": 0}
            turns.append(Turn(tenant, body, ids))
    rng.shuffle(turns)
    return turns


def best_possible_hit_tokens(turns: list[Turn], block_size: int = 16) -> int:
    """Each request finds cached every full block it shares with an earlier request of its
    tenant."""
    best = 0
    for i, turn in enumerate(turns):
        earlier = [t.token_ids for t in turns[:i] if t.tenant == turn.tenant]
        shared = max((common_prefix_length(turn.token_ids, e) for e in earlier), default=0)
        # A prompt that is all cached still recomputes its last token (the engine needs logits).
        shared = min(shared, len(turn.token_ids) - 1)
        best += shared // block_size * block_size
    return best


async def send_all(
    url: str, bodies: list[dict[str, Any]], concurrency: int, path: str = "/v1/chat/completions"
) -> list[httpx.Response]:
    """POST every body, at most `concurrency` at a time, in order of the list."""
    semaphore = asyncio.Semaphore(concurrency)
    async with httpx.AsyncClient(timeout=60.0) as client:

        async def one(body: dict[str, Any]) -> httpx.Response:
            async with semaphore:
                return await client.post(url + path, json=body)

        return list(await asyncio.gather(*(one(b) for b in bodies)))
