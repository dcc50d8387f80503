"""The built-in autoscaler's task: every autoscale_interval_seconds, for each LLMDeployment with
autoscaling.mode builtin, poll its routers, decide, and write spec.replicas (the operator owns the
field while autoscaling is on: a `kubectl scale` is overridden at the next tick), an Event when it
changes and status.autoscaler with the inputs. The update of spec.replicas reaches the engine
Deployment through the usual reconcile (the update handler); the write waits for a reconcile of the
same LLMDeployment in progress (`lock`, the reconciler's), since that one read spec.replicas before
it and would otherwise apply the old count to the Deployment after it. Of several operator
replicas only kopf's active peer runs it (leadership.py). The windows live in its memory and in
the ConfigMap `<name>-autoscaler` (state_store.py): a restarted operator, or a replica that
becomes the active peer, resumes from what was recorded there instead of starting empty; a replica
forgets the windows of every namespace where it is not the active peer, so it reads them afresh
when it leads again.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from llm_operator import API_VERSION, KIND
from llm_operator.api.spec import InvalidSpecError, LLMDeploymentSpec, parse_spec
from llm_operator.autoscaler.events import post_event
from llm_operator.autoscaler.record import Clock
from llm_operator.autoscaler.rule import (
    SCALING_REASONS,
    Decision,
    Observation,
    ScalerState,
    decide,
)
from llm_operator.autoscaler.scale_down import annotation_patches, coldest
from llm_operator.autoscaler.signals import RouterDemand, poll_routers, ready_pod_ips
from llm_operator.autoscaler.state_store import StateStore
from llm_operator.conditions import now_rfc3339
from llm_operator.fleet.status import deployment_counts
from llm_operator.k8s.kube import KubeClient, KubeError
from llm_operator.k8s.leadership import Peering, is_active
from llm_operator.k8s.resources import KINDS, LLM_DEPLOYMENT, POD, collection_paths
from llm_operator.names import engine_name, selector_labels, selector_string
from llm_operator.operator_metrics import AutoscalerReading, OperatorMetrics
from llm_operator.settings import OperatorSettings

Obj = dict[str, Any]
logger = logging.getLogger(__name__)
STATUS_EVERY_S = 10.0  # status.autoscaler between scale events: inputs change every tick


@dataclass
class Autoscaler:
    kube: KubeClient
    settings: OperatorSettings
    lock: Callable[[str, str], asyncio.Lock] = lambda namespace, name: asyncio.Lock()
    """The reconciler's lock of an LLMDeployment (controller/reconcile.py)."""
    metrics: OperatorMetrics = field(default_factory=lambda: OperatorMetrics(SCALING_REASONS))
    states: dict[tuple[str, str], ScalerState] = field(default_factory=dict)
    _status_at: dict[tuple[str, str], float] = field(default_factory=dict)
    store: StateStore = field(init=False)

    def __post_init__(self) -> None:
        self.store = StateStore(self.kube)

    async def run_forever(self, peering: Peering | None) -> None:
        while True:
            await asyncio.sleep(self.settings.autoscale_interval_seconds)
            try:
                await self.tick(peering)
            except Exception:  # one bad pass must not end the autoscaler
                logger.exception("autoscaler pass failed")

    async def tick(self, peering: Peering | None = None) -> None:
        for namespace, path in collection_paths(self.settings.namespaces):
            if not await is_active(self.kube, peering, namespace):
                self._forget(namespace)  # another peer decides (and records) here
                continue
            listing = await self.kube.get(path)
            items = (listing or {}).get("items", [])
            for body in items:
                body.setdefault("apiVersion", API_VERSION)  # a list's items may omit them
                body.setdefault("kind", KIND)
                await self.scale_one(body)
            # What is kept of LLMDeployments gone since ends here, even those deleted mid-tick.
            self._retain(
                namespace, {(b["metadata"]["namespace"], b["metadata"]["name"]) for b in items}
            )

    async def scale_one(self, body: Mapping[str, Any]) -> Decision | None:
        meta = body["metadata"]
        key = (meta["namespace"], meta["name"])
        epoch = self.metrics.epoch(key)  # deleted mid-tick: this tick's metrics are dropped
        try:
            spec = parse_spec(body)
        except InvalidSpecError:
            return None  # the reconciler says why in status
        if not spec.autoscaling.builtin or meta.get("deletionTimestamp"):
            if self.states.pop(key, None) is not None and not meta.get("deletionTimestamp"):
                await self.store.discard(key)  # turned off (a deletion takes it with the owner)
            self._status_at.pop(key, None)
            self.store.forget(key)
            self.metrics.forget_autoscaler(key)
            return None
        demand = await self._demand(*key)
        if demand is None:
            self.metrics.observe_no_demand(key, epoch)
            return None  # no router answered: no decision (status keeps the last one)
        clock = Clock(time.monotonic(), time.time())
        state = self.states.get(key)
        if state is None:  # first decision since this replica started or became the leader
            state = self.states[key] = await self.store.load(body, spec.autoscaling, clock)
        obs = await self._observe(key, spec, demand, clock.monotonic)
        decision = decide(spec.autoscaling, state, obs)
        scaled = decision.replicas != spec.replicas
        if scaled:
            await self._scale(body, spec.replicas, decision, demand)
            self.metrics.count_scaling(key, spec.replicas, decision.replicas, decision.cause, epoch)
        self.metrics.observe_autoscaler(key, reading(spec, obs, decision, demand), epoch)
        await self.store.save(key, state, clock, force=scaled)
        await self._write_status(body, key, decision, demand, scaled)
        return decision

    async def flush(self) -> None:
        """Record every window now (the operator is stopping)."""
        clock = Clock(time.monotonic(), time.time())
        for key, state in list(self.states.items()):
            await self.store.save(key, state, clock, force=True)

    def _forget(self, namespace: str | None) -> None:
        self._retain(namespace, set())

    def _retain(self, namespace: str | None, keys: set[tuple[str, str]]) -> None:
        """Forget every LLMDeployment in `namespace` (None: all) but `keys`: its windows, when
        its status was written, its record's bookkeeping and its series (gone, or decided by
        another peer)."""
        known = {*self.states, *self._status_at}
        for key in [k for k in known if (namespace is None or k[0] == namespace)]:
            if key not in keys:
                self.states.pop(key, None)
                self._status_at.pop(key, None)
                self.store.forget(key)
        self.metrics.retain_autoscaled(namespace, keys)

    async def _demand(self, namespace: str, name: str) -> RouterDemand | None:
        selector = selector_string(selector_labels(name, "router"))
        pods = await self.kube.list(POD.collection_path(namespace), selector)
        return await poll_routers(ready_pod_ips(pods), self.settings.scrape_timeout_seconds)

    async def _observe(
        self, key: tuple[str, str], spec: LLMDeploymentSpec, demand: RouterDemand, now: float
    ) -> Observation:
        engine = await self.kube.get(KINDS["Deployment"].object_path(key[0], engine_name(key[1])))
        _, _, ready = deployment_counts(engine)
        return Observation(
            now=now,
            num_held=demand.num_held,
            num_inflight=demand.num_inflight,
            idle_seconds=demand.idle_seconds,
            ready_replicas=ready,
            current_replicas=spec.replicas,
            num_engine_requests=demand.num_engine_requests,
            num_queued=demand.num_queued,
            oldest_queued_seconds=demand.oldest_queued_seconds,
        )

    async def _scale(
        self, body: Mapping[str, Any], current: int, decision: Decision, demand: RouterDemand
    ) -> None:
        meta = body["metadata"]
        going = ""
        if decision.replicas < current:
            going = await self._mark_coldest(meta["namespace"], meta["name"], demand)
        path = LLM_DEPLOYMENT.object_path(meta["namespace"], meta["name"])
        async with self.lock(meta["namespace"], meta["name"]):
            await self.kube.patch(path, {"spec": {"replicas": decision.replicas}})
        reason = "ScaledToZero" if decision.replicas == 0 else "Scaled"
        message = f"engine replicas {current} -> {decision.replicas}: {decision.reason}{going}"
        logger.info("%s/%s %s", meta["namespace"], meta["name"], message)
        await post_event(self.kube, body, reason, message)

    async def _mark_coldest(self, namespace: str, name: str, demand: RouterDemand) -> str:
        """Deletion costs on the engine pods, so the coldest cache goes; ' (<pod> first)'."""
        selector = selector_string(selector_labels(name, "engine"))
        pods = await self.kube.list(POD.collection_path(namespace), selector)
        for pod_name, patch in annotation_patches(pods, demand.prefix_hit_scores).items():
            try:
                await self.kube.patch(POD.object_path(namespace, pod_name), patch)
            except KubeError as error:  # e.g. no pods patch RBAC: scale down anyway
                logger.warning("cannot set the deletion cost of %s: %s", pod_name, error)
        first = coldest(pods, demand.prefix_hit_scores)
        return f" ({first} has the coldest cache)" if first else ""

    async def _write_status(
        self,
        body: Mapping[str, Any],
        key: tuple[str, str],
        decision: Decision,
        demand: RouterDemand,
        scaled: bool,
    ) -> None:
        now = time.monotonic()
        if not scaled and now - self._status_at.get(key, -STATUS_EVERY_S) < STATUS_EVERY_S:
            return
        self._status_at[key] = now
        status: Obj = {
            "desiredReplicas": decision.replicas,
            "reason": decision.reason,
            "stableConcurrency": decision.stable_concurrency,
            "panicConcurrency": decision.panic_concurrency,
            "panicking": decision.panicking,
            "numHeld": demand.num_held,
            "numInflight": demand.num_inflight,
            "numQueued": demand.num_queued,
            "oldestQueuedSeconds": demand.oldest_queued_seconds,
            "numRouters": demand.num_routers,
        }
        if scaled:
            status["lastScaleTime"] = now_rfc3339()
        path = LLM_DEPLOYMENT.object_path(key[0], key[1], "status")
        await self.kube.patch(path, {"status": {"autoscaler": status}})


def reading(
    spec: LLMDeploymentSpec, obs: Observation, decision: Decision, demand: RouterDemand
) -> AutoscalerReading:
    """What the metrics show of one tick."""
    autoscaling = spec.autoscaling
    return AutoscalerReading(
        desired_replicas=decision.replicas,
        wanted_replicas=decision.wanted_replicas,
        current_replicas=obs.current_replicas,
        ready_replicas=obs.ready_replicas,
        min_replicas=autoscaling.min_replicas,
        max_replicas=autoscaling.max_replicas,
        target_concurrency=autoscaling.target_concurrency,
        concurrency=obs.concurrency,
        stable_concurrency=decision.stable_concurrency,
        panic_concurrency=decision.panic_concurrency,
        panicking=decision.panicking,
        num_held_requests=demand.num_held,
        num_inflight_requests=demand.num_inflight,
        num_routers=demand.num_routers,
    )
