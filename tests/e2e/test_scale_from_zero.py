"""Scale from zero, end to end: an LLMDeployment with the built-in autoscaler at minReplicas 0.
Twenty requests (every third streamed) arrive while no engine exists: the router holds them, the
operator sees the demand and scales to one, and all twenty are answered, dispatched in arrival
order; the twenty-first, beyond the hold queue, gets a 503 at once. Idle for
scaleToZeroAfterSeconds, it goes back to zero, and a request brings an engine back.

That last request is the scale-from-zero path undisturbed: its time to first token (sent to the
router while no engine exists) and the new engine pod's start-up stages (status.startup) are
printed, and with PAGEDOCK_E2E_COLD_START_OUT=FILE appended to FILE as one JSON line.
PAGEDOCK_E2E_COLD_START_ARM=before runs the engines with the start-up speed-ups off
(docs/server.md#cold-start), `after` (the default) as they come."""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.e2e.cluster import Cluster, eventually, get_json
from tests.e2e.scaling import (
    ROUTER_PORT,
    autoscaled,
    complete,
    demand,
    scale_events,
    spec_replicas,
    wait_scaled_to_zero,
)

pytestmark = [pytest.mark.e2e, pytest.mark.asyncio, pytest.mark.timeout(900)]
QUEUE_SIZE = 20
ENGINE_PORT = 8000
IDLE_SECONDS = 15
ARM = os.environ.get("PAGEDOCK_E2E_COLD_START_ARM", "after")
# The engine environment that turns the start-up speed-ups off (EngineConfig's fields).
SPEED_UPS_OFF = [
    {"name": "PAGEDOCK_CPU_KERNELS_CACHE", "value": "false"},
    {"name": "PAGEDOCK_WEIGHTS_LOAD_STRATEGY", "value": "copy"},
    {"name": "PAGEDOCK_KV_CACHE_PREFAULT", "value": "true"},
]


async def test_held_requests_bring_an_engine_from_zero_and_idle_takes_it_back(
    cluster: Cluster,
) -> None:
    started = time.monotonic()
    edit = autoscaled(
        {"minReplicas": 0, "maxReplicas": 1, "scaleToZeroAfterSeconds": IDLE_SECONDS},
        {"holdQueueSize": QUEUE_SIZE, "holdTimeoutSeconds": 600},
    )
    assert ARM in ("before", "after"), f"PAGEDOCK_E2E_COLD_START_ARM={ARM}: before or after"
    await cluster.apply_example(_with_arm(edit))
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
        back = await _timed_stream(http, router.ip, "Back again?")
        assert back["status"] == 200 and back["text"], back
    await _report_cold_start(cluster, back)
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


def _with_arm(edit: Any) -> Any:
    def arm_edit(obj: dict[str, Any]) -> dict[str, Any]:
        obj = edit(obj)
        if ARM == "before":
            obj["spec"]["env"] = [*obj["spec"].get("env", []), *SPEED_UPS_OFF]
        return obj

    return arm_edit


async def _timed_stream(http: aiohttp.ClientSession, ip: str, prompt: str) -> dict[str, Any]:
    """A streamed completion through the router: status, text, and seconds from sending it to
    its first text and to its end."""
    body = {"prompt": prompt, "max_tokens": 8, "stream": True, "temperature": 0}
    url = f"http://{ip}:{ROUTER_PORT}/v1/completions"
    sent, first, text = time.monotonic(), None, ""
    async with http.post(url, json=body, timeout=aiohttp.ClientTimeout(total=600)) as response:
        async for raw in response.content:
            line = raw.decode().strip()
            if not line.startswith("data: {"):
                continue
            chunk = json.loads(line[6:])
            piece = "".join(c.get("text", "") for c in chunk.get("choices", []))
            if piece and first is None:
                first = time.monotonic()
            text += piece
        status = response.status
    done = time.monotonic()
    ttft = None if first is None else round(first - sent, 3)
    return {"status": status, "text": text, "ttft_s": ttft, "total_s": round(done - sent, 3)}


async def _report_cold_start(cluster: Cluster, back: dict[str, Any]) -> None:
    """The new engine pod's stages: its own GET /startup, read before idleness takes it away
    (it has the first request's stage), and status.startup, which must name that pod."""
    [engine] = cluster.kubelet.pods("smollm2-engine-")

    async def own() -> dict[str, Any]:
        report: dict[str, Any] = await get_json(engine.ip, ENGINE_PORT, "/startup")
        return report if "first_request_served" in report["stages"] else {}

    report = await eventually(own, 10, "the engine's /startup with first_request_served")

    def startup() -> dict[str, Any]:
        return dict(cluster.llmd("default", "smollm2").get("status", {}).get("startup") or {})

    await eventually(
        lambda: startup().get("pod") == engine.name,
        60,
        lambda: f"status.startup {startup()} (engine pod {engine.name})",
    )
    status = startup()
    for stage, seconds in status["stages"].items():  # the operator's copy of the same start
        assert seconds == round(report["stages"][_SNAKE[stage]], 3), (stage, status, report)
    figures = {"arm": ARM, "scale_from_zero_ttft_s": back["ttft_s"], "total_s": back["total_s"]}
    figures |= {"pod": engine.name, "stages": report["stages"], "status_startup": status}
    stages = "  ".join(f"{k} {v:.2f}" for k, v in report["stages"].items())
    print(f"scale from zero ({ARM}): first token {back['ttft_s']} s after the request; {stages}")
    if out := os.environ.get("PAGEDOCK_E2E_COLD_START_OUT"):
        with Path(out).open("a") as f:
            f.write(json.dumps(figures) + "\n")


_SNAKE = {
    "importsDone": "imports_done",
    "weightsLocated": "weights_located",
    "kernelsReady": "kernels_ready",
    "weightsLoaded": "weights_loaded",
    "warmupDone": "warmup_done",
    "ready": "ready",
    "firstRequestServed": "first_request_served",
}
