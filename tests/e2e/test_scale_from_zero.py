"""Scale from zero, end to end: an LLMDeployment with the built-in autoscaler at minReplicas 0.
Twenty requests (every third streamed) arrive while no engine exists: the router holds them, the
operator sees the demand and scales to one, and all twenty are answered, dispatched in arrival
order; the twenty-first, beyond the hold queue, gets a 503 at once. Idle for
scaleToZeroAfterSeconds, it goes back to zero, and a request brings an engine back."""

from __future__ import annotations

import asyncio
import time

import aiohttp
import pytest

from tests.e2e.cluster import Cluster, eventually
from tests.e2e.scaling import (
    autoscaled,
    complete,
    demand,
    scale_events,
    spec_replicas,
    wait_scaled_to_zero,
)

pytestmark = [pytest.mark.e2e, pytest.mark.asyncio, pytest.mark.timeout(900)]
QUEUE_SIZE = 20
IDLE_SECONDS = 15


async def test_held_requests_bring_an_engine_from_zero_and_idle_takes_it_back(
    cluster: Cluster,
) -> None:
    started = time.monotonic()
    edit = autoscaled(
        {"minReplicas": 0, "maxReplicas": 1, "scaleToZeroAfterSeconds": IDLE_SECONDS},
        {"holdQueueSize": QUEUE_SIZE, "holdTimeoutSeconds": 600},
    )
    await cluster.apply_example(edit)
    await wait_scaled_to_zero(cluster, timeout=420)
    [router] = cluster.kubelet.pods("smollm2-router-")
    # New pods stay Pending until the queue is full, so the 21st meets a full queue and no engine
    # however fast one would start; the operator's 0 -> 1 is still what brings the engine.
    cluster.kubelet.admitting = False
    async with aiohttp.ClientSession() as http:
        held = []
        for i in range(QUEUE_SIZE):
            prompt = f"Request {i}: count to three."
            held.append(asyncio.create_task(complete(http, router.ip, prompt, stream=i % 3 == 0)))
            await eventually(lambda n=i + 1: _held(router.ip, n), 30, f"{i + 1} requests held")
        assert not cluster.kubelet.pods("smollm2-engine-") and spec_replicas(cluster) <= 1
        refused_at = time.monotonic()
        refused = await complete(http, router.ip, "one too many", stream=False)
        assert refused["status"] == 503, refused["raw"]
        assert time.monotonic() - refused_at < 5
        assert int(refused["headers"]["Retry-After"]) >= 1
        cluster.kubelet.admitting = True
        cluster.kubelet.wake()
        results = await asyncio.wait_for(asyncio.gather(*held), timeout=420)
        from_zero_s = time.monotonic() - refused_at
        assert [r["status"] for r in results] == [200] * QUEUE_SIZE, [r["raw"] for r in results]
        assert all(r["text"] for r in results)
        seqs = [r["seq"] for r in results]
        assert seqs == sorted(seqs), f"dispatch order {seqs} is not the arrival order"
        assert spec_replicas(cluster) == 1
        print(
            f"from zero: all {QUEUE_SIZE} held requests answered {from_zero_s:.1f} s "
            "after the 21st was refused"
        )

        await wait_scaled_to_zero(cluster, timeout=IDLE_SECONDS + 120)
        back = await complete(http, router.ip, "Back again?", stream=True)
        assert back["status"] == 200 and back["text"], back["raw"]
    reasons = [e["reason"] for e in scale_events(cluster)]
    assert reasons[:2] == ["Scaled", "ScaledToZero"], reasons  # 0 -> 1 -> 0 (-> 1 again)

    def autoscaler() -> dict:
        return cluster.llmd("default", "smollm2")["status"]["autoscaler"]

    # The status is written on the autoscaler's next pass, a moment after its decision.
    await eventually(
        lambda: autoscaler()["desiredReplicas"] == 1 and autoscaler()["numRouters"] == 1,
        60,
        lambda: f"autoscaler status {autoscaler()}",
    )
    print(f"scenario took {time.monotonic() - started:.0f} s; events: {reasons}")


async def _held(ip: str, n: int) -> bool:
    return bool((await demand(ip))["num_held"] >= n)
