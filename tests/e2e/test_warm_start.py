"""Warm start, end to end, in one run: sixteen tenants, each with its own long prompt prefix, send
requests through a round-robin router (so a new engine gets its share at once). Engine B joins
with warm start off; then warm start is turned on (router.warmPrefixes), the tenants' traffic
goes on, and engine C joins. C's prefix-cache hit rate over its first 50 requests (its own
counters) is higher than B's over theirs: it was sent the hot prefixes before its first request."""

from __future__ import annotations

import asyncio
import itertools
import time
from typing import Any

import aiohttp
import pytest

from tests.e2e.cluster import LLMD, Cluster, eventually, get_json
from tests.e2e.scaling import complete

pytestmark = [pytest.mark.e2e, pytest.mark.asyncio, pytest.mark.timeout(1500)]
NUM_TENANTS = 16
FIRST_REQUESTS = 50


def tenant_prompt(tenant: int, n: int) -> str:
    words = " ".join(f"{chr(97 + tenant % 26)}{tenant}w{i}" for i in range(16))
    return f"T{tenant} policy: {words}. Question {n}: summarise."


def round_robin(warm_prefixes: int) -> Any:
    def edit(obj: dict) -> dict:
        # a generous warm timeout: on this loaded 2-core machine one prefill can take seconds
        obj["spec"]["router"] = {
            "policy": "round-robin",
            "warmPrefixes": warm_prefixes,
            "warmTimeoutSeconds": 300,
        }
        return obj

    return edit


async def test_a_warmed_engine_hits_the_cache_more_in_its_first_requests(cluster: Cluster) -> None:
    started = time.monotonic()
    await cluster.apply_example(round_robin(0))
    await cluster.wait_ready("default", "smollm2", timeout=420)
    counter = itertools.count()
    # force_close: the router closes idle keep-alive connections after 5 s, and this test idles
    # longer than that between requests (a pooled connection could be closing under the next one)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as http:
        router = await _router(cluster)
        await _tenant_traffic(http, router, counter, rounds=1)
        cold = await _first_requests_hit_rate(cluster, http, counter, replicas=2)
        [old] = cluster.kubelet.pods("smollm2-router-")
        patch = {"spec": {"router": {"warmPrefixes": NUM_TENANTS}}}
        assert await cluster.client.patch(LLMD, "default", "smollm2", patch) < 400
        await eventually(
            lambda: _router_args_have(cluster, "--warm-prefixes", str(NUM_TENANTS)),
            120,
            "the router restarted with warm start",
        )
        router = await _router(cluster, replaced=old.name)
        await _tenant_traffic(http, router, counter, rounds=1)  # the new router learns what is hot
        warm = await _first_requests_hit_rate(cluster, http, counter, replicas=3)
    print(
        f"warm start: a new engine's prefix hit rate over its first {FIRST_REQUESTS} requests: "
        f"{cold:.2f} without warming, {warm:.2f} with; "
        f"took {time.monotonic() - started:.0f} s"
    )
    assert warm > cold


async def _router(cluster: Cluster, replaced: str = "") -> str:
    def one_ready_router() -> str | None:
        pods = cluster.kubelet.pods("smollm2-router-")
        fresh = len(pods) == 1 and pods[0].ready and pods[0].name != replaced
        return pods[0].ip if fresh else None

    ip: str = await eventually(one_ready_router, 120, "one ready router")
    return ip


def _router_args_have(cluster: Cluster, flag: str, value: str) -> bool:
    pods = cluster.pod_objects("default", "smollm2-router-")
    args = [p["spec"]["containers"][0]["args"] for p in pods]
    return len(args) == 1 and value == args[0][args[0].index(flag) + 1]


async def _tenant_traffic(
    http: aiohttp.ClientSession, router: str, counter: Any, rounds: int
) -> list[dict]:
    results = []
    for _ in range(rounds):
        for tenant in range(NUM_TENANTS):
            result = await complete(
                http, router, tenant_prompt(tenant, next(counter)), stream=False, max_tokens=1
            )
            assert result["status"] == 200, result["raw"]
            results.append(result)
    return results


async def _first_requests_hit_rate(
    cluster: Cluster, http: aiohttp.ClientSession, counter: Any, replicas: int
) -> float:
    """Scale to `replicas`, wait for the new engine to be a candidate, then send tenant traffic
    until it served FIRST_REQUESTS; its hit rate (tokens) over exactly those requests."""
    before = {p.ip for p in cluster.kubelet.pods("smollm2-engine-")}
    await cluster.scale(LLMD, "default", "smollm2", replicas)
    router = await _router(cluster)

    async def new_candidate() -> str | None:
        view = await get_json(router, 8080, "/router/replicas")
        fresh = [
            r["url"]
            for r in view["replicas"]
            if r["healthy"]
            and not r["warming"]
            and r["url"].split("//")[1].split(":")[0] not in before
        ]
        return fresh[0] if len(view["replicas"]) == replicas and fresh else None

    url = await eventually(new_candidate, 300, f"engine {replicas} a routing candidate")
    ip = url.split("//")[1].split(":")[0]
    hits0, queries0 = await _prefix_counters(ip)
    served, tenants = 0, itertools.cycle(range(NUM_TENANTS))
    while served < FIRST_REQUESTS:
        # one request per engine at a time (round-robin): the new engine's share arrives in order
        batch = [
            complete(
                http,
                router,
                tenant_prompt(next(tenants), next(counter)),
                stream=False,
                max_tokens=1,
            )
            for _ in range(min(replicas, FIRST_REQUESTS - served))
        ]
        for result in await asyncio.gather(*batch):
            assert result["status"] == 200, result["raw"]
            served += result["replica"] == url
    await asyncio.sleep(0.5)
    hits1, queries1 = await _prefix_counters(ip)
    return (hits1 - hits0) / max(queries1 - queries0, 1.0)


async def _prefix_counters(ip: str) -> tuple[float, float]:
    async with aiohttp.ClientSession() as http, http.get(f"http://{ip}:8000/metrics") as response:
        text = await response.text()
    totals = {"vllm:prefix_cache_hits_total": 0.0, "vllm:prefix_cache_queries_total": 0.0}
    for line in text.splitlines():
        name = line.split("{")[0].split(" ")[0]
        if name in totals:
            totals[name] += float(line.rsplit(" ", 1)[1])
    return totals["vllm:prefix_cache_hits_total"], totals["vllm:prefix_cache_queries_total"]
