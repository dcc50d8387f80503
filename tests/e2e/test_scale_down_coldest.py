"""Cache-aware scale-down, end to end: two engines, one of them hot (a tenant's long shared prefix
routed to it again and again), the other cold. Turning the built-in autoscaler on with little load
scales to one after the stabilization window: the operator marks the pods'
pod-deletion-cost from the routers' prefix hits, the stand-in ReplicaSet deletes the cold one,
and the streams in flight meanwhile all finish cleanly."""

from __future__ import annotations

import asyncio
import time

import aiohttp
import pytest

from tests.e2e.cluster import LLMD, Cluster, eventually, get_json
from tests.e2e.scaling import complete, demand, scale_events, spec_replicas

pytestmark = [pytest.mark.e2e, pytest.mark.asyncio, pytest.mark.timeout(900)]
HOT_PREFIX = " ".join(f"clause {i} of the tenant's shared contract;" for i in range(40))


def two_engines(obj: dict) -> dict:
    obj["spec"]["replicas"] = 2
    # NOTE: the stand-in runs grace periods at 0.2 x; the drain (and so the grace period, drain +
    # 20 s) must cover a stream on this loaded machine, where one token can take a second.
    obj["spec"]["drainTimeoutSeconds"] = 200
    return obj


async def test_scale_down_removes_the_coldest_engine_and_no_stream_fails(cluster: Cluster) -> None:
    started = time.monotonic()
    await cluster.apply_example(two_engines)
    await cluster.wait_ready("default", "smollm2", timeout=420)
    [router] = cluster.kubelet.pods("smollm2-router-")

    async def both_healthy() -> bool:
        view = await get_json(router.ip, 8080, "/router/replicas")
        return sum(r["healthy"] and r["kv_synced"] for r in view["replicas"]) == 2

    await eventually(both_healthy, 240, "two engines healthy in the router")
    async with aiohttp.ClientSession() as http:
        for i in range(12):
            hot = await complete(http, router.ip, f"{HOT_PREFIX} Question {i}?", stream=False)
            assert hot["status"] == 200, hot["raw"]
        scores = {r["url"]: r["prefix_hit_score"] for r in (await demand(router.ip))["replicas"]}
        hot_url = max(scores, key=lambda url: scores[url])
        cold_url = min(scores, key=lambda url: scores[url])
        assert scores[hot_url] > scores[cold_url], scores
        cold_pod = next(
            p.name for p in cluster.kubelet.pods("smollm2-engine-") if hot_url.find(p.ip) < 0
        )

        stop = asyncio.Event()
        streams: list[dict] = []
        workers = [
            asyncio.create_task(_stream_until(http, router.ip, stop, streams, w)) for w in range(2)
        ]
        autoscaling = {
            "enabled": True,
            "minReplicas": 1,
            "maxReplicas": 2,
            "targetConcurrency": 4,
            "stableWindowSeconds": 6,
            "scaleDownStabilizationSeconds": 10,
        }
        assert (
            await cluster.client.patch(
                LLMD, "default", "smollm2", {"spec": {"autoscaling": autoscaling}}
            )
            < 400
        )

        def one_engine_left() -> bool:
            return spec_replicas(cluster) == 1 and len(cluster.kubelet.pods("smollm2-engine-")) == 1

        await eventually(one_engine_left, 180, "scaled down to one engine")
        await asyncio.sleep(3)  # streams that were on the deleted engine finish their drain
        stop.set()
        await asyncio.wait_for(asyncio.gather(*workers), timeout=120)

    [left] = cluster.kubelet.pods("smollm2-engine-")
    assert hot_url == f"http://{left.ip}:8000", f"the hot engine {hot_url} went, {left.ip} stayed"
    failed = [s for s in streams if s["status"] != 200 or not s["text"]]
    assert not failed, failed
    messages = [e["message"] for e in scale_events(cluster)]
    assert any(cold_pod in m for m in messages), messages
    print(
        f"scale-down: {len(streams)} streams, none failed; {cold_pod} (cold) went; "
        f"scores {scores}; took {time.monotonic() - started:.0f} s"
    )


async def _stream_until(
    http: aiohttp.ClientSession, ip: str, stop: asyncio.Event, results: list[dict], worker: int
) -> None:
    n = 0
    while not stop.is_set():
        results.append(
            await complete(
                http, ip, f"Worker {worker} story {n}: once upon a time", stream=True, max_tokens=16
            )
        )
        n += 1
