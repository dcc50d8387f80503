"""The client side of the tenant benchmarks (benchmarks/tenant_fairness.py): streamed completions
sent as a tenant, open-loop at Poisson arrival times or closed-loop, each measured as its client
sees it (time to the first token, status and error code)."""

from __future__ import annotations

import asyncio
import json
import random
import statistics
import time
from dataclasses import dataclass
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

VOCAB = range(200, 40_000)  # plain-text token ids of SmolLM2's 49,152


@dataclass
class Sent:
    tenant: str
    status: int
    ttft_s: float | None = None
    e2e_s: float = 0.0
    code: str | None = None
    """The error code of a refusal (429 fleet_saturated, ...)."""


def prompt(rng: random.Random, num_tokens: int) -> list[int]:
    """Random token ids: no two requests share a cached prefix."""
    return [rng.choice(VOCAB) for _ in range(num_tokens)]


def arrivals(rng: random.Random, rate_per_s: float, duration_s: float) -> list[float]:
    times, t = [], rng.expovariate(rate_per_s)
    while t < duration_s:
        times.append(t)
        t += rng.expovariate(rate_per_s)
    return times


async def send(
    client: httpx.AsyncClient, url: str, key: str, tenant: str, body: dict[str, Any]
) -> Sent:
    started = time.perf_counter()
    sent = Sent(tenant, 0)
    headers = {"Authorization": f"Bearer {key}"}
    try:
        async with client.stream(
            "POST", url + "/v1/completions", json=body, headers=headers
        ) as response:
            sent.status = response.status_code
            if response.status_code != 200:
                error = json.loads(await response.aread()).get("error", {})
                sent.code = error.get("code")
                return sent
            async for line in response.aiter_lines():
                if sent.ttft_s is None and line.startswith("data: {") and '"text"' in line:
                    sent.ttft_s = time.perf_counter() - started
    except httpx.HTTPError as e:
        sent.code = type(e).__name__
    finally:
        sent.e2e_s = time.perf_counter() - started
    return sent


def body_of(ids: list[int], max_tokens: int) -> dict[str, Any]:
    return {
        "prompt": ids,
        "max_tokens": max_tokens,
        "temperature": 0.0,
        "ignore_eos": True,  # equal work for every request
        "stream": True,
        "stream_options": {"include_usage": True},
    }


async def open_loop(
    client: httpx.AsyncClient,
    url: str,
    key: str,
    tenant: str,
    schedule: list[tuple[float, dict[str, Any]]],
) -> list[Sent]:
    """Each body sent at its time (seconds from now), whatever is still running."""
    start = time.perf_counter()

    async def one(at_s: float, body: dict[str, Any]) -> Sent:
        await asyncio.sleep(max(0.0, start + at_s - time.perf_counter()))
        return await send(client, url, key, tenant, body)

    return list(await asyncio.gather(*(one(at, body) for at, body in schedule)))


async def closed_loop(
    client: httpx.AsyncClient,
    url: str,
    key: str,
    tenant: str,
    bodies: list[dict[str, Any]],
    concurrency: int,
    stop: asyncio.Event | None = None,
) -> list[Sent]:
    """`concurrency` requests in flight until the bodies run out (or `stop` is set)."""
    queue = list(reversed(bodies))
    results: list[Sent] = []

    async def worker() -> None:
        while queue and not (stop and stop.is_set()):
            results.append(await send(client, url, key, tenant, queue.pop()))

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return results


def summary(sent: list[Sent]) -> dict[str, Any]:
    """Counts by status and code, and TTFT of the served (median, p90, p99, max; seconds)."""
    ttfts = sorted(s.ttft_s for s in sent if s.status == 200 and s.ttft_s is not None)
    codes: dict[str, int] = {}
    for s in sent:
        key = "ok" if s.status == 200 else f"{s.status} {s.code}"
        codes[key] = codes.get(key, 0) + 1
    row: dict[str, Any] = {"sent": len(sent), "outcomes": codes}
    if ttfts:
        row |= {
            "ttft_p50_s": round(statistics.median(ttfts), 4),
            "ttft_p90_s": round(_pct(ttfts, 90), 4),
            "ttft_p99_s": round(_pct(ttfts, 99), 4),
            "ttft_max_s": round(ttfts[-1], 4),
        }
    return row


def _pct(sorted_values: list[float], pct: int) -> float:
    index = min(len(sorted_values) - 1, max(0, round(pct / 100 * len(sorted_values)) - 1))
    return sorted_values[index]


async def counter_total(client: httpx.AsyncClient, url: str, name: str) -> float:
    """The sum of a Prometheus counter's samples on `url`/metrics (0 when absent)."""
    text = (await client.get(f"{url}/metrics")).text
    return sum(
        s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == name
    )


async def router_waits(client: httpx.AsyncClient, url: str, tenant: str) -> dict[str, float]:
    """How long `tenant`'s admitted requests waited in the router's flow queues (its
    pagedock_router_flow_queue_wait_seconds on `url`/metrics): how many, in all, and how many
    waited longer than 10 ms and 100 ms."""
    text = (await client.get(f"{url}/metrics")).text
    samples = [
        s
        for family in text_string_to_metric_families(text)
        if family.name == "pagedock_router_flow_queue_wait_seconds"
        for s in family.samples
        if s.labels.get("tenant") == tenant
    ]
    count = sum(s.value for s in samples if s.name.endswith("_count"))
    within = {
        le: sum(s.value for s in samples if s.name.endswith("_bucket") and s.labels["le"] == le)
        for le in ("0.01", "0.1")
    }
    return {
        "requests": count,
        "total_s": round(sum(s.value for s in samples if s.name.endswith("_sum")), 3),
        "over_10ms": count - within["0.01"],
        "over_100ms": count - within["0.1"],
    }
