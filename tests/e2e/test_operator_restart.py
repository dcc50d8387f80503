"""Restarting the operator under load changes nothing (issue 35): the operator pod is deleted while
the built-in autoscaler holds two engines in its scale-down stabilization window, and its
replacement comes back. No engine pod is restarted or replaced, no request fails, and the new
operator's first decision is the old one's ("held at 2 by the window", from the windows it
resumed out of the ConfigMap `smollm2-autoscaler`), where an operator that starts with empty
windows says "no scale-down in the first stabilization window" and scales down a whole window
late. The scale-down then comes when the recorded window runs out.

And rolling the routers (two replicas, a PodDisruptionBudget, a surge and none unavailable) under
streaming load loses no request: clients reach a ready router through the router Service's
EndpointSlice, a new connection each request, as kube-proxy would send them, and the old routers
finish what they hold in flight (preStop, then their drain on SIGTERM) before they exit."""

from __future__ import annotations

import asyncio
import datetime
import itertools
import time

import aiohttp
import pytest

from tests.e2e.cluster import LLMD, Cluster, Obj, eventually, get_json
from tests.e2e.controllers import template_hash
from tests.e2e.pod import PodRunner
from tests.e2e.rbac import assert_every_request_allowed
from tests.e2e.scaling import complete, scale_events, spec_replicas

pytestmark = [pytest.mark.e2e, pytest.mark.asyncio, pytest.mark.timeout(900)]
OPERATOR_NAMESPACE = "pagedock-system"
STABILIZATION_S = 90
HELD = "wants 1, held at 2 by the scale-down stabilization window"
SENTINEL = "cleared by the test while no operator runs"


def autoscaled(obj: Obj) -> Obj:
    """One engine to start; one stream in flight wants one, two want two."""
    spec = obj["spec"]
    spec["replicas"] = 1
    # NOTE: the stand-in runs grace periods at 0.2 x; the drain must cover a stream on this
    # loaded machine when the scale-down takes an engine away (as in test_scale_down_coldest).
    spec["drainTimeoutSeconds"] = 200
    spec["autoscaling"] = {
        "enabled": True,
        "minReplicas": 1,
        "maxReplicas": 2,
        "targetConcurrency": 1,
        "stableWindowSeconds": 10,
        "scaleDownStabilizationSeconds": STABILIZATION_S,
    }
    return obj


async def test_a_restarted_operator_restarts_no_engine_and_keeps_its_windows(
    cluster: Cluster,
) -> None:
    started = time.monotonic()
    await cluster.apply_example(autoscaled)
    await cluster.wait_ready("default", "smollm2", timeout=420)
    [router] = cluster.kubelet.pods("smollm2-router-")
    results: list[Obj] = []
    async with aiohttp.ClientSession() as http:
        stop_all, stop_second = asyncio.Event(), asyncio.Event()
        first = asyncio.create_task(_stream_until(http, router.ip, stop_all, results, 0))
        second = asyncio.create_task(_stream_until(http, router.ip, stop_second, results, 1))
        await eventually(lambda: _two_serving(cluster, router.ip), 300, "two engines under load")
        engines, template = _engine_pods(cluster), _engine_template(cluster)
        stop_second.set()
        await asyncio.wait_for(second, 300)
        dropped_at = time.time()
        # (Until a stabilization window after the autoscaler's first tick, the first-window guard
        # holds instead, and says so.)
        await eventually(
            lambda: _autoscaler_reason(cluster) == HELD,
            STABILIZATION_S + 30,
            lambda: f"the window holding two engines, saw {_autoscaler_status(cluster)}",
        )
        admitted_at = await _restart_operator(cluster)
        first_reason = await eventually(
            lambda: (reason := _autoscaler_reason(cluster)) not in (SENTINEL, None) and reason,
            120,
            "the new operator's first decision in status.autoscaler",
        )
        decided_at = time.time()  # within a poll (0.2 s) of the new operator's first decision
        assert first_reason == HELD, f"the new operator decided {first_reason!r}"
        assert _engine_pods(cluster) == engines, "an engine pod was restarted or replaced"
        assert _engine_template(cluster) == template
        assert spec_replicas(cluster) == 2
        await eventually(
            lambda: (
                spec_replicas(cluster) == 1 and len(cluster.kubelet.pods("smollm2-engine-")) == 1
            ),
            STABILIZATION_S + 120,
            "one engine once the recorded window ran out",
        )
        stop_all.set()
        await asyncio.wait_for(first, 300)
    [down] = [e for e in scale_events(cluster) if "replicas 2 -> 1" in e["message"]]
    down_at = _epoch(down["lastTimestamp"])
    # Held for the whole window after the load dropped (Event times are whole seconds), but not
    # for a window after the new operator's first decision, as empty windows would hold it.
    assert dropped_at + STABILIZATION_S - 1 <= down_at < decided_at + STABILIZATION_S - 1.5, (
        f"scaled down {down_at - dropped_at:.0f} s after the load dropped, "
        f"{down_at - decided_at:.0f} s after the new operator's first decision"
    )
    failed = [r for r in results if r["status"] != 200 or not r["text"]]
    assert not failed, failed
    [left] = cluster.pod_objects("default", "smollm2-engine-")
    assert left["metadata"]["uid"] in engines
    assert cluster.api.live("v1/configmaps", "default", "smollm2-autoscaler") is not None
    assert_every_request_allowed(cluster.api)
    print(
        f"operator restart: {len(results)} requests, none failed; scaled down "
        f"{down_at - dropped_at:.0f} s after the load dropped, "
        f"{down_at - decided_at:.0f} s after the new operator's first decision (it could start "
        f"{decided_at - admitted_at:.0f} s before that); took {time.monotonic() - started:.0f} s"
    )


async def _restart_operator(cluster: Cluster) -> float:
    """Delete the operator pod; while its replacement is held Pending (the old process gone),
    mark status.autoscaler so that what it says next is the new operator's. When it may start."""
    [old] = cluster.kubelet.pods("pagedock-", OPERATOR_NAMESPACE)
    cluster.kubelet.admitting = False
    try:
        assert await cluster.client.delete("v1/pods", OPERATOR_NAMESPACE, old.name) < 400

        def replaced() -> bool:
            exited = all(
                c.process is None or c.process.returncode is not None for c in old.containers
            )
            pods = cluster.pod_objects(OPERATOR_NAMESPACE, "pagedock-")
            return exited and any(p["metadata"]["uid"] != old.uid for p in pods)

        await eventually(replaced, 120, "the old operator exited and a new pod was made")
        mark = {"status": {"autoscaler": {"reason": SENTINEL}}}
        assert await cluster.client.patch(LLMD, "default", "smollm2", mark, "status") < 400
    finally:
        cluster.kubelet.admitting = True
    return time.time()


async def _two_serving(cluster: Cluster, router_ip: str) -> bool:
    if spec_replicas(cluster) != 2 or len(_engine_pods(cluster)) != 2:
        return False
    view = await get_json(router_ip, 8080, "/router/replicas")
    return sum(r["healthy"] for r in view["replicas"]) == 2


def _engine_pods(cluster: Cluster) -> dict[str, int]:
    """Engine pod uid -> restarts of its containers."""
    return {
        pod["metadata"]["uid"]: sum(
            s.get("restartCount", 0) for s in (pod.get("status") or {}).get("containerStatuses", [])
        )
        for pod in cluster.pod_objects("default", "smollm2-engine-")
    }


def _engine_template(cluster: Cluster) -> str:
    engine = cluster.api.live("apps/v1/deployments", "default", "smollm2-engine") or {}
    return template_hash(engine)


def _autoscaler_status(cluster: Cluster) -> Obj:
    """status.autoscaler: the last decision's reason and its inputs (written every 10 s)."""
    return dict(cluster.llmd("default", "smollm2").get("status", {}).get("autoscaler", {}))


def _autoscaler_reason(cluster: Cluster) -> str | None:
    reason = (
        cluster.llmd("default", "smollm2").get("status", {}).get("autoscaler", {}).get("reason")
    )
    return str(reason) if reason is not None else None


def _epoch(rfc3339: str) -> float:
    return datetime.datetime.fromisoformat(rfc3339.replace("Z", "+00:00")).timestamp()


async def _stream_until(
    http: aiohttp.ClientSession, ip: str, stop: asyncio.Event, results: list[Obj], worker: int
) -> None:
    n = 0
    while not stop.is_set():
        prompt = f"Worker {worker} story {n}: once upon a time"
        results.append(await complete(http, ip, prompt, stream=True, max_tokens=16))
        n += 1


def two_routers(obj: Obj) -> Obj:
    obj["spec"]["router"] = {**obj["spec"].get("router", {}), "replicas": 2}
    return obj


async def test_rolling_the_routers_under_load_loses_no_request(cluster: Cluster) -> None:
    started = time.monotonic()
    cluster.kubelet.lifecycle_time_scale = 1.0  # preStop and grace periods in real seconds
    await cluster.apply_example(two_routers)
    await cluster.wait_ready("default", "smollm2", timeout=420)
    pdb = cluster.api.live("policy/v1/poddisruptionbudgets", "default", "smollm2-router") or {}
    assert pdb.get("spec", {}).get("maxUnavailable") == 1, pdb
    await eventually(lambda: len(_router_endpoints(cluster)) == 2, 240, "two routers ready")
    old = cluster.kubelet.pods("smollm2-router-")
    results: list[Obj] = []
    stop = asyncio.Event()
    turn = itertools.count()
    connector = aiohttp.TCPConnector(force_close=True)  # a new connection, a new endpoint
    async with aiohttp.ClientSession(connector=connector) as http:
        clients = [
            asyncio.create_task(_through_the_service(http, cluster, stop, results, turn, i))
            for i in range(3)
        ]
        await eventually(lambda: len(results) >= 3, 240, "answers before the roll")
        now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        restart = {"kubectl.kubernetes.io/restartedAt": now}  # `kubectl rollout restart`
        patch = {"spec": {"template": {"metadata": {"annotations": restart}}}}
        deployments = "apps/v1/deployments"
        assert await cluster.client.patch(deployments, "default", "smollm2-router", patch) < 400
        rolled = time.monotonic()
        await eventually(lambda: _rolled(cluster, old), 300, "two new routers, the old ones gone")
        rolled = time.monotonic() - rolled
        before = len(results)
        await eventually(lambda: len(results) >= before + 3, 240, "answers after the roll")
        stop.set()
        await asyncio.wait_for(asyncio.gather(*clients), 300)
    failed = [r for r in results if r["status"] != 200 or not r["text"]]
    assert not failed, failed
    print(
        f"router roll: {len(results)} requests, none failed; the roll took {rolled:.0f} s; "
        f"took {time.monotonic() - started:.0f} s"
    )


def _router_endpoints(cluster: Cluster) -> list[str]:
    """The ready addresses of the router Service's EndpointSlice."""
    slices = cluster.api.all_live("discovery.k8s.io/v1/endpointslices", "default")
    return [
        endpoint["addresses"][0]
        for piece in slices
        if piece["metadata"]["labels"].get("kubernetes.io/service-name") == "smollm2-router"
        for endpoint in piece.get("endpoints", [])
        if endpoint["conditions"]["ready"]
    ]


def _rolled(cluster: Cluster, old: list[PodRunner]) -> bool:
    """Two routers of the new template, ready, and the old ones' processes exited."""
    runners = cluster.kubelet.pods("smollm2-router-")
    if any(r in old for r in runners) or len(runners) != 2 or not all(r.ready for r in runners):
        return False
    return all(
        c.process is None or c.process.returncode is not None for r in old for c in r.containers
    )


async def _through_the_service(
    http: aiohttp.ClientSession,
    cluster: Cluster,
    stop: asyncio.Event,
    results: list[Obj],
    turn: itertools.count[int],
    client: int,
) -> None:
    n = 0
    while not stop.is_set():
        endpoints = _router_endpoints(cluster)
        if not endpoints:  # no ready router: what a client sees as a refused connection
            results.append({"status": 0, "text": None, "raw": "no ready router endpoint"})
            await asyncio.sleep(0.2)
            continue
        ip = endpoints[next(turn) % len(endpoints)]
        prompt = f"Client {client} story {n}: once upon a time"
        try:
            results.append(await complete(http, ip, prompt, stream=True, max_tokens=16))
        except (aiohttp.ClientError, TimeoutError) as error:
            results.append({"status": 0, "text": None, "raw": f"{ip}: {error!r}"})
        n += 1
