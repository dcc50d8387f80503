"""Helpers of the autoscaling scenarios: an LLMDeployment that scales from zero, requests sent one
by one into the router's hold queue, streamed and plain completions, the replica timeline."""

from __future__ import annotations

import json
import time
from typing import Any

import aiohttp

from tests.e2e.cluster import Cluster, Obj, eventually, get_json

ROUTER_PORT = 8080
DISPATCH_HEADER = "x-pagedock-dispatch-seq"


def autoscaled(autoscaling: Obj, router: Obj | None = None) -> Any:
    """An edit of the example: the built-in autoscaler on with these fields, starting at zero."""

    def edit(obj: Obj) -> Obj:
        spec = obj["spec"]
        spec["replicas"] = 0 if autoscaling.get("minReplicas", 1) == 0 else 1
        spec["autoscaling"] = {"enabled": True, **autoscaling}
        spec["router"] = {**spec.get("router", {}), **(router or {})}
        return obj

    return edit


async def demand(ip: str) -> Obj:
    view: Obj = await get_json(ip, ROUTER_PORT, "/router/demand")
    return view


async def complete(
    http: aiohttp.ClientSession, ip: str, prompt: str, stream: bool, max_tokens: int = 8
) -> Obj:
    """One completion: status, dispatch order, and the text (a stream read to its end)."""
    body = {"prompt": prompt, "max_tokens": max_tokens, "stream": stream, "temperature": 0}
    url = f"http://{ip}:{ROUTER_PORT}/v1/completions"
    started = time.monotonic()
    async with http.post(url, json=body, timeout=aiohttp.ClientTimeout(total=600)) as response:
        raw = await response.text()
        result: Obj = {
            "status": response.status,
            "seq": int(response.headers.get(DISPATCH_HEADER, "-1")),
            "seconds": time.monotonic() - started,
            "headers": dict(response.headers),
            "raw": raw,
            "replica": response.headers.get("x-pagedock-replica"),
        }
    result["text"] = _text(raw, stream) if response.status == 200 else None
    return result


def _text(raw: str, stream: bool) -> str:
    if not stream:
        return str(json.loads(raw)["choices"][0]["text"])
    events = [line[6:] for line in raw.splitlines() if line.startswith("data: ")]
    assert events and events[-1] == "[DONE]", raw
    chunks = [json.loads(e) for e in events[:-1]]
    assert all("error" not in c for c in chunks), raw
    return "".join(c["choices"][0].get("text", "") for c in chunks)


def spec_replicas(cluster: Cluster) -> int:
    return int(cluster.llmd("default", "smollm2").get("spec", {}).get("replicas", -1))


def scale_events(cluster: Cluster) -> list[Obj]:
    """The autoscaler's Events on the LLMDeployment, oldest first."""
    events = cluster.api.all_live("v1/events", "default")
    mine = [e for e in events if e.get("reason") in ("Scaled", "ScaledToZero")]
    return sorted(mine, key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or "")


async def wait_scaled_to_zero(cluster: Cluster, timeout: float) -> None:
    """At zero as a client sees it: no engine pod, Ready says ScaledToZero, and the router knows no
    replica (a draining engine it still lists would answer the next request with no scale-up)."""

    async def at_zero() -> bool:
        ready = cluster.condition("default", "smollm2", "Ready")
        gone = not cluster.kubelet.pods("smollm2-engine-")
        if not (
            spec_replicas(cluster) == 0
            and gone
            and ready.get("reason") == "ScaledToZero"
            and ready.get("status") == "True"
        ):
            return False
        known = [(await demand(r.ip))["replicas"] for r in cluster.kubelet.pods("smollm2-router-")]
        return not any(known)

    await eventually(
        at_zero,
        timeout,
        lambda: f"scaled to zero, Ready={cluster.condition('default', 'smollm2', 'Ready')}",
    )
