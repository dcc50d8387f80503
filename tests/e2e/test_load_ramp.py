"""The built-in autoscaler under a load ramp, end to end: a bounded load generator against the
router drives the engines from 1 up (never above maxReplicas) and, once it stops, back down after
the stabilization window, with at most two direction changes per stabilization window (counted
from the autoscaler's scale Events). Prints the replica timeline."""

from __future__ import annotations

import asyncio
import re
import time

import aiohttp
import pytest

from tests.e2e.cluster import Cluster, eventually
from tests.e2e.scaling import autoscaled, complete, demand, scale_events, spec_replicas

pytestmark = [pytest.mark.e2e, pytest.mark.asyncio, pytest.mark.timeout(900)]
MAX_REPLICAS = 3
STABILIZATION_S = 20
LOAD_WORKERS = 4
LOAD_SECONDS = 75


async def test_a_load_ramp_scales_up_within_max_and_back_down_without_flapping(
    cluster: Cluster,
) -> None:
    started = time.monotonic()
    edit = autoscaled(
        {
            "minReplicas": 1,
            "maxReplicas": MAX_REPLICAS,
            "targetConcurrency": 1,
            "stableWindowSeconds": 10,
            "scaleDownStabilizationSeconds": STABILIZATION_S,
        }
    )
    await cluster.apply_example(edit)
    await cluster.wait_ready("default", "smollm2", timeout=420)
    [router] = cluster.kubelet.pods("smollm2-router-")
    timeline: list[tuple[float, int, int, int]] = []
    sampler = asyncio.create_task(_sample(cluster, router.ip, timeline, started))
    results: list[dict] = []
    async with aiohttp.ClientSession() as http:
        deadline = time.monotonic() + LOAD_SECONDS
        workers = [_load(http, router.ip, deadline, results, w) for w in range(LOAD_WORKERS)]
        await asyncio.gather(*workers)
        peak = max(replicas for _, replicas, _, _ in timeline)
        await eventually(
            lambda: spec_replicas(cluster) == 1, 240, "back to one engine after the load"
        )
    sampler.cancel()
    print("replica timeline (s, spec.replicas, ready, held+inflight):")
    for t, replicas, ready, concurrency in _changes(timeline):
        print(f"  {t:6.1f}  {replicas}  {ready}  {concurrency}")
    steps = _scale_steps(cluster)
    print(
        f"scale events: {steps}; {len(results)} requests; took {time.monotonic() - started:.0f} s"
    )
    assert all(r["status"] == 200 for r in results), [
        r["raw"] for r in results if r["status"] != 200
    ]
    assert 2 <= peak <= MAX_REPLICAS
    assert max(replicas for _, replicas, _, _ in timeline) <= MAX_REPLICAS
    assert _most_direction_changes(steps, STABILIZATION_S) <= 2, steps


async def _load(
    http: aiohttp.ClientSession, ip: str, deadline: float, results: list[dict], worker: int
) -> None:
    n = 0
    while time.monotonic() < deadline:
        prompt = f"Worker {worker}, request {n}: write a line about autumn."
        results.append(await complete(http, ip, prompt, stream=n % 2 == 0, max_tokens=24))
        n += 1


async def _sample(cluster: Cluster, ip: str, timeline: list, started: float) -> None:
    while True:
        view = await demand(ip)
        status = cluster.llmd("default", "smollm2").get("status", {})
        concurrency = view["num_held"] + view["num_inflight"]
        timeline.append(
            (
                time.monotonic() - started,
                spec_replicas(cluster),
                status.get("readyReplicas", 0),
                concurrency,
            )
        )
        await asyncio.sleep(0.5)


def _changes(timeline: list[tuple[float, int, int, int]]) -> list[tuple[float, int, int, int]]:
    """The samples where replicas or ready changed (the timeline worth printing)."""
    shown, last = [], None
    for sample in timeline:
        if (sample[1], sample[2]) != last:
            shown.append(sample)
            last = (sample[1], sample[2])
    return shown


def _scale_steps(cluster: Cluster) -> list[tuple[float, int, int]]:
    """(seconds since the first event, from, to) of every scale Event."""
    steps = []
    for event in scale_events(cluster):
        found = re.search(r"engine replicas (\d+) -> (\d+)", event["message"])
        if found:
            steps.append((event["lastTimestamp"], int(found[1]), int(found[2])))
    first = _seconds(steps[0][0]) if steps else 0.0
    return [(_seconds(t) - first, a, b) for t, a, b in steps]


def _seconds(rfc3339: str) -> float:
    return time.mktime(time.strptime(rfc3339, "%Y-%m-%dT%H:%M:%SZ"))


def _most_direction_changes(steps: list[tuple[float, int, int]], window_s: float) -> int:
    """The most changes of direction (up after down, down after up) within any window."""
    turns, direction = [], 0
    for t, before, after in steps:
        step = 1 if after > before else -1
        if direction and step != direction:
            turns.append(t)
        direction = step
    return max((sum(1 for u in turns if t <= u < t + window_s) for t in turns), default=0)
