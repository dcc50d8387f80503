"""Workload A's requests sent as benchmarks/load_generator.py sends them (a fixed concurrency,
streamed), each with a W3C `traceparent` of its own: the load of benchmarks/tracing_overhead.py,
where both arms carry the same headers so that the work is equal."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Sequence
from contextvars import ContextVar

import httpx

from benchmarks.load_generator import RequestResult, send_one
from benchmarks.workloads import Workload

_TRACEPARENT: ContextVar[str | None] = ContextVar("traceparent", default=None)


def traceparents(count: int, seed: int) -> list[str]:
    """`count` W3C traceparent headers, each a trace of its own (sampled), seeded."""
    rng = random.Random(seed)
    return [
        f"00-{rng.getrandbits(128) | 1:032x}-{rng.getrandbits(64) | 1:016x}-01"
        for _ in range(count)
    ]


def trace_id_of(traceparent: str) -> str:
    return traceparent.split("-")[1]


async def _add_traceparent(request: httpx.Request) -> None:
    value = _TRACEPARENT.get()
    if value is not None:
        request.headers["traceparent"] = value


async def send_traced(
    url: str, workload: Workload, headers: Sequence[str], concurrency: int
) -> tuple[list[RequestResult], float]:
    """load_generator.send_all at a fixed concurrency, each request with its own `traceparent`
    (send_all's client sends the same headers on every request): each task sets it in its own
    context, and a request hook of the client puts it on the request."""
    if len(headers) != len(workload.prompts):
        raise ValueError(f"{len(headers)} traceparents for {len(workload.prompts)} prompts")
    limits = httpx.Limits(max_connections=max(concurrency, 64) + 8)
    limit = asyncio.Semaphore(concurrency)
    hooks = {"request": [_add_traceparent]}
    async with httpx.AsyncClient(
        base_url=url, timeout=600, limits=limits, event_hooks=hooks
    ) as client:

        async def one(prompt: list[int], traceparent: str) -> RequestResult:
            async with limit:
                _TRACEPARENT.set(traceparent)  # this task's context only
                return await send_one(client, None, prompt, workload.max_tokens)

        started = time.perf_counter()
        tasks = [
            asyncio.create_task(one(p, h)) for p, h in zip(workload.prompts, headers, strict=True)
        ]
        results = await asyncio.gather(*tasks)
        duration = time.perf_counter() - started
    return list(results), duration
