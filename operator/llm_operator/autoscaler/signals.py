"""The demand signal: every ready router pod's GET /router/demand, polled by the operator.

NOTE: a small endpoint the operator polls (every autoscaleIntervalSeconds, 1 s by default), not an
annotation the routers write: the routers need no API write access, several router replicas are
summed without write conflicts, and a held request is seen within one poll. Routers are found
through their pods (podIP of the ready ones), so each is asked once.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from llm_operator.names import ROUTER_PORT

Obj = dict[str, Any]


@dataclass(frozen=True)
class RouterDemand:
    """The sum over the routers that answered."""

    num_routers: int
    num_held: int
    num_inflight: int
    idle_seconds: float
    """The smallest: the last request any router received."""
    prefix_hit_scores: dict[str, float] = field(default_factory=dict)
    """Engine pod IP -> recent cached prompt tokens routed to it, summed over the routers."""
    engine_inflight: dict[str, int] = field(default_factory=dict)
    """Engine pod IP -> requests in flight to it, summed over the routers."""
    num_engine_requests: int = 0
    """Requests the engines themselves report running or waiting (each engine once: the most any
    router saw), which also counts clients that reach an engine without a router."""
    num_queued: int = 0
    """Requests waiting in the routers' flow queues for a slot (docs/tenants.md)."""
    oldest_queued_seconds: float = 0.0
    """How long the oldest of those has waited (the longest any router reports)."""


def ready_pod_ips(pods: list[Obj]) -> list[str]:
    ips = []
    for pod in pods:
        status = pod.get("status") or {}
        ready = any(
            c.get("type") == "Ready" and c.get("status") == "True"
            for c in status.get("conditions") or []
        )
        if ready and status.get("podIP") and not pod["metadata"].get("deletionTimestamp"):
            ips.append(status["podIP"])
    return sorted(ips)


def combine(views: list[Obj]) -> RouterDemand | None:
    """One demand from several routers' views; None when no router answered."""
    if not views:
        return None
    scores: dict[str, float] = defaultdict(float)
    inflight: dict[str, int] = defaultdict(int)
    reported: dict[str, float] = defaultdict(float)
    for view in views:
        for replica in view.get("replicas", []):
            ip = _host(replica["url"])
            scores[ip] += float(replica.get("prefix_hit_score", 0.0))
            inflight[ip] += int(replica.get("inflight", 0))
            load = float(replica.get("num_requests_running", 0)) + float(
                replica.get("num_requests_waiting", 0)
            )
            reported[ip] = max(reported[ip], load)
    return RouterDemand(
        num_routers=len(views),
        num_held=sum(int(v.get("num_held", 0)) for v in views),
        num_inflight=sum(int(v.get("num_inflight", 0)) for v in views),
        idle_seconds=min(float(v.get("idle_seconds", 0.0)) for v in views),
        prefix_hit_scores=dict(scores),
        engine_inflight=dict(inflight),
        num_engine_requests=round(sum(reported.values())),
        num_queued=sum(int(v.get("num_flow_queued", 0)) for v in views),
        oldest_queued_seconds=max(float(v.get("oldest_flow_queued_seconds", 0.0)) for v in views),
    )


async def poll_routers(ips: list[str], timeout_seconds: float) -> RouterDemand | None:
    timeout = aiohttp.ClientTimeout(total=timeout_seconds)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        views = await asyncio.gather(*(_poll(session, ip) for ip in ips))
    return combine([view for view in views if view is not None])


async def _poll(session: aiohttp.ClientSession, ip: str) -> Obj | None:
    host = f"[{ip}]" if ":" in ip else ip
    try:
        async with session.get(f"http://{host}:{ROUTER_PORT}/router/demand") as response:
            if response.status != 200:
                return None
            view: Obj = await response.json()
            return view
    except (aiohttp.ClientError, TimeoutError, ValueError):
        return None


def _host(url: str) -> str:
    """The host of http://host:port (an engine's pod IP)."""
    rest = url.split("://", 1)[-1]
    if rest.startswith("["):
        return rest[1 : rest.index("]")]
    return rest.rsplit(":", 1)[0]
