"""Level-based reconciliation of one LLMDeployment: children create-or-patch, prune, status.

Every pass builds the full desired state and compares it with what is live; it writes only what
differs, so a pass over an unchanged, healthy deployment sends no writes at all.
"""

import asyncio
import dataclasses
import functools
import logging
import time
from collections.abc import Mapping
from typing import Any, cast

import kopf

from llm_operator import API_VERSION, KIND
from llm_operator.api.spec import InvalidSpecError, parse_spec
from llm_operator.builders import BuildContext, build_children, child_refs
from llm_operator.builders.adapter_source import adapter_problem, lora_enabled
from llm_operator.conditions import (
    Condition,
    condition_message,
    conditions_of,
    merge_conditions,
)
from llm_operator.controller.adapter_delivery import deliver_adapters
from llm_operator.controller.adapter_sync import AdapterSync
from llm_operator.controller.drain_sizing import DrainSizing
from llm_operator.controller.model_delivery import (
    ModelDelivery,
    deliver_model,
    held_back,
    model_claim_shared,
    with_delivery,
)
from llm_operator.controller.reconcile_outcome import GONE, ApplyIssues, error_reason
from llm_operator.fleet.adapter_status import adapter_warnings, adapters_ready
from llm_operator.fleet.gateway_status import gateway_state
from llm_operator.fleet.metrics import FleetStats
from llm_operator.fleet.pod_failures import read_engine_failure
from llm_operator.fleet.startup import EngineStartups
from llm_operator.fleet.status import (
    INVALID_SPEC,
    ChildrenState,
    build_conditions,
    deployment_counts,
    invalid_spec_conditions,
    transition_warnings,
)
from llm_operator.k8s.diff import is_subset, merge_patch, with_last_applied
from llm_operator.k8s.kube import KubeClient, KubeError
from llm_operator.k8s.resources import KINDS, LLM_DEPLOYMENT, ResourceKind, kind_of
from llm_operator.names import engine_name, router_name, selector_labels, selector_string
from llm_operator.operator_metrics import OperatorMetrics
from llm_operator.settings import OperatorSettings

Obj = dict[str, Any]
logger = logging.getLogger(__name__)
# NOTE: the API server refused the object itself (RBAC, an admission webhook, validation): the same
# request fails again until someone changes something, so the refusal goes into status (and every
# resync tries again) instead of failing the whole reconcile.
REFUSED_STATUSES = frozenset({400, 403, 422})


@dataclasses.dataclass
class Reconciler:
    kube: KubeClient
    settings: OperatorSettings
    _locks: dict[tuple[str, str], asyncio.Lock] = dataclasses.field(default_factory=dict)
    # NOTE: the conditions last written, per object, to see transitions: the body a handler gets
    # may predate the previous pass's status patch (handlers queue on the lock), and comparing
    # with it would warn again.
    _written: dict[tuple[str, str], list[Obj]] = dataclasses.field(default_factory=dict)
    adapters: AdapterSync = dataclasses.field(init=False)
    startups: EngineStartups = dataclasses.field(init=False)
    drains: DrainSizing = dataclasses.field(init=False)
    _followups: set[asyncio.Task[None]] = dataclasses.field(default_factory=set)
    _followup_due: set[tuple[str, str]] = dataclasses.field(default_factory=set)
    metrics: OperatorMetrics = dataclasses.field(default_factory=OperatorMetrics)

    def __post_init__(self) -> None:
        self.adapters = AdapterSync(self.kube, self._follow_up)
        self.startups = EngineStartups(self.kube, self.settings)
        self.drains = DrainSizing(self.kube, self.settings)

    def lock(self, namespace: str, name: str) -> asyncio.Lock:
        return self._locks.setdefault((namespace, name), asyncio.Lock())

    def forget(self, namespace: str, name: str) -> None:
        self._locks.pop((namespace, name), None)
        self._written.pop((namespace, name), None)
        self._followup_due.discard((namespace, name))
        self.adapters.forget(namespace, name)
        self.startups.forget(namespace, name)
        self.drains.forget(namespace, name)
        self.metrics.forget((namespace, name))

    async def reconcile(self, body: Mapping[str, Any], stats: FleetStats | None = None) -> None:
        """Bring the children and the status of this LLMDeployment in line with its spec."""
        key = (body["metadata"]["namespace"], body["metadata"]["name"])
        async with self.lock(*key):
            started = time.monotonic()  # the pass, not its wait for the one before
            # NOTE: the object may be deleted (and forgotten) while the pass runs: its count
            # is then dropped, not a series that outlives the object (operator_metrics.py).
            epoch = self.metrics.epoch(key)
            try:
                failure = await self._reconcile(body, stats)
            except Exception as error:
                seconds = time.monotonic() - started
                self.metrics.count_reconcile(key, seconds, error_reason(error), epoch)
                raise
            finally:
                if self.metrics.epoch(key) != epoch:  # forgotten while the pass ran
                    self._written.pop(key, None)
            if failure != GONE:
                self.metrics.count_reconcile(key, time.monotonic() - started, failure, epoch)

    async def _reconcile(self, body: Mapping[str, Any], stats: FleetStats | None) -> str | None:
        """One pass, under the lock: None, the Ready reason of what it could not apply, or GONE."""
        meta = body["metadata"]
        self._followup_due.discard((meta["namespace"], meta["name"]))
        # NOTE: as it is now, not `body` (read before the lock: a resync's list, then its
        # scrape): a spec.replicas the autoscaler wrote since must not be undone.
        latest = await self.kube.get(LLM_DEPLOYMENT.object_path(meta["namespace"], meta["name"]))
        if latest is None or latest["metadata"].get("deletionTimestamp"):
            return GONE
        body = {"apiVersion": API_VERSION, "kind": KIND, **latest}
        meta = body["metadata"]
        try:
            spec = parse_spec(body)
        except InvalidSpecError as error:
            await self._reject(body, str(error))
            return INVALID_SPEC
        ctx = BuildContext(meta["name"], meta["namespace"], spec, self.settings)
        if (problem := adapter_problem(ctx)) is not None:
            await self._reject(body, problem)
            return INVALID_SPEC
        delivery = await deliver_model(self.kube, body, ctx, functools.partial(emit, body))
        shared = await model_claim_shared(self.kube, ctx)
        ctx = dataclasses.replace(
            ctx, claim_shared=delivery.claim_shared, model_claim_shared=shared
        )
        ctx = await self.drains.size(body, ctx)
        issues = ApplyIssues()
        live = await self._apply_children(body, ctx, held_back(ctx, delivery), issues)
        await self._prune(body, ctx)
        adapters = await self._sync_adapters(body, ctx)
        await self._write_status(body, ctx, live, stats, delivery, issues, adapters)
        return issues.reason()

    async def _sync_adapters(self, body: Mapping[str, Any], ctx: BuildContext) -> list[Obj] | None:
        """status.adapters (controller/adapter_sync.py); None with LoRA off, when the Jobs of
        adapters declared before are deleted."""
        if lora_enabled(ctx):
            return await self.adapters.sync(body, ctx, functools.partial(emit, body))
        if (body.get("status") or {}).get("adapters"):
            await deliver_adapters(self.kube, body, ctx, [], functools.partial(emit, body))
        return None

    def _follow_up(self, namespace: str, name: str) -> None:
        """Reconcile this LLMDeployment again soon (a background adapter load ended); loads that
        end before that pass starts share it."""
        if (namespace, name) in self._followup_due:
            return
        self._followup_due.add((namespace, name))
        task = asyncio.create_task(self._reconcile_latest(namespace, name))
        self._followups.add(task)
        task.add_done_callback(self._followups.discard)

    async def _reconcile_latest(self, namespace: str, name: str) -> None:
        try:  # reconcile reads the object itself
            await self.reconcile({"metadata": {"namespace": namespace, "name": name}})
        except Exception:  # the next event or resync reconciles it anyway
            logger.exception("reconcile of %s/%s after an adapter load failed", namespace, name)

    async def _apply_children(
        self, body: Mapping[str, Any], ctx: BuildContext, held: frozenset[str], issues: ApplyIssues
    ) -> dict[str, Obj]:
        children = build_children(ctx)
        kopf.adopt(children, owner=dict(body))  # type: ignore[arg-type]
        applied = await asyncio.gather(
            *(self._apply(body, child, _key(child) in held, issues) for child in children)
        )
        return {_key(obj): obj for obj in applied if obj is not None}

    async def _apply(
        self, body: Mapping[str, Any], child: Obj, hold: bool, issues: ApplyIssues
    ) -> Obj | None:
        """Create the child, or patch it when a field we own differs; otherwise leave it alone.
        A held child (waiting for the model download) is only read, never created or patched.
        A refusal by the API server goes into `issues`, and so does a kind whose CRD is not
        installed; the child stays as it is (or absent), the other children are applied."""
        desired = with_last_applied(child)
        kind, name = kind_of(child), child["metadata"]["name"]
        path = kind.object_path(child["metadata"]["namespace"], name)
        live = await self.kube.get(path)
        if hold or (live is not None and is_subset(desired, live)):
            return live
        try:
            return await self._write_child(body, kind, desired, live)
        except KubeError as error:
            if error.status == 404 and kind.crd is not None:  # the API has no such resource
                logger.warning(
                    "cannot create %s %s: the %s CRD is not installed", kind.kind, name, kind.crd
                )
                issues.missing_crds.append(kind.crd)
                return None
            if error.status not in REFUSED_STATUSES:
                raise
            logger.warning("the API server refused %s %s: %s", kind.kind, name, error)
            issues.refusals.append(f"{kind.kind} {name}: {error.message}")
            return live

    async def _write_child(
        self, body: Mapping[str, Any], kind: ResourceKind, desired: Obj, live: Obj | None
    ) -> Obj:
        namespace, name = desired["metadata"]["namespace"], desired["metadata"]["name"]
        if live is None:
            created = await self.kube.create(kind.collection_path(namespace), desired)
            emit(body, reason="Created", message=f"created {kind.kind} {name}")
            return created or desired
        patched = await self.kube.patch(
            kind.object_path(namespace, name), merge_patch(desired, live)
        )
        emit(body, reason="Updated", message=f"updated {kind.kind} {name}")
        return patched or live

    async def _prune(self, body: Mapping[str, Any], ctx: BuildContext) -> None:
        unwanted = [(kind, name) for kind, name, wanted in child_refs(ctx) if not wanted]
        await asyncio.gather(*(self._delete_owned(body, kind, name) for kind, name in unwanted))

    async def _delete_owned(self, body: Mapping[str, Any], kind_name: str, name: str) -> None:
        path = KINDS[kind_name].object_path(body["metadata"]["namespace"], name)
        live = await self.kube.get(path)
        if live is None or not is_owned_by(live, body):
            return
        await self.kube.delete(path)
        emit(body, reason="Deleted", message=f"deleted {kind_name} {name}")

    async def _write_status(
        self,
        body: Mapping[str, Any],
        ctx: BuildContext,
        live: dict[str, Obj],
        stats: FleetStats | None,
        delivery: ModelDelivery,
        issues: ApplyIssues,
        adapters: list[Obj] | None = None,
    ) -> None:
        generation = body["metadata"].get("generation")
        state = await self._children_state(ctx, live, issues)
        engine_status = (state.engine or {}).get("status", {})
        status: Obj = {
            "observedGeneration": generation,
            "replicas": engine_status.get("replicas", 0),
            "readyReplicas": engine_status.get("readyReplicas", 0),
            "selector": selector_string(selector_labels(ctx.name, "engine")),
            "endpoint": ctx.endpoint(),
            "model": ctx.served_model_name,
            **(stats.status_fields() if stats is not None else {}),
            "adapters": adapters,
            "adaptersReady": None if adapters is None else adapters_ready(adapters),
            "startup": await self.startups.read(ctx.namespace, ctx.name, state.engine),
            "drain": self.drains.status(ctx.namespace, ctx.name),
        }
        conditions = build_conditions(state, ctx.spec.model.source, generation)
        conditions = with_delivery(conditions, delivery, generation)
        old = self._written.get((ctx.namespace, ctx.name), conditions_of(body))
        await self._patch_status(body, status, conditions)
        for reason, message in transition_warnings(old, conditions):
            emit(body, reason, message, type_="Warning")
        old_adapters = (body.get("status") or {}).get("adapters") or []
        for reason, message in adapter_warnings(old_adapters, adapters or []):
            emit(body, reason, message, type_="Warning")

    async def _children_state(
        self, ctx: BuildContext, live: dict[str, Obj], issues: ApplyIssues
    ) -> ChildrenState:
        engine = live.get(f"Deployment/{engine_name(ctx.name)}")
        refusals = sorted(issues.refusals)
        rejection = refusals[0] if refusals else None
        if len(refusals) > 1:
            rejection = f"{rejection} (and {len(refusals) - 1} more, see the operator log)"
        return ChildrenState(
            engine=engine,
            router=live.get(f"Deployment/{router_name(ctx.name)}"),
            ingress=live.get(f"Ingress/{ctx.name}"),
            router_enabled=ctx.spec.router.enabled,
            ingress_enabled=ctx.spec.ingress.enabled,
            gateway=gateway_state(ctx, live, issues.missing_crds),
            engine_failure=await read_engine_failure(
                self.kube, ctx.namespace, ctx.name, deployment_counts(engine)
            ),
            rejection=rejection,
            zero_by_policy=ctx.spec.autoscaling.enabled and ctx.spec.autoscaling.min_replicas == 0,
        )

    async def _reject(self, body: Mapping[str, Any], message: str) -> None:
        generation = body["metadata"].get("generation")
        old = body.get("status") or {}
        changed = condition_message(old, "Ready") != message
        await self._patch_status(
            body, {"observedGeneration": generation}, invalid_spec_conditions(message, generation)
        )
        if changed:
            emit(body, "InvalidSpec", message, type_="Warning")

    async def _patch_status(
        self, body: Mapping[str, Any], status: Obj, conditions: list[Condition]
    ) -> None:
        old = body.get("status") or {}
        new = {key: value for key, value in status.items() if value is not None}
        # NOTE: a field that no longer applies (adapters once LoRA is off) is removed (null).
        new.update({key: None for key in CLEARABLE if status.get(key, 0) is None and key in old})
        new["conditions"] = merge_conditions(old.get("conditions", []), conditions)
        meta = body["metadata"]
        if not is_subset(new, old):
            path = LLM_DEPLOYMENT.object_path(meta["namespace"], meta["name"], "status")
            await self.kube.patch(path, {"status": new})
        self._written[meta["namespace"], meta["name"]] = new["conditions"]


CLEARABLE = ("adapters", "adaptersReady")


def emit(body: Mapping[str, Any], reason: str, message: str, type_: str = "Normal") -> None:
    """A Kubernetes Event on the LLMDeployment (kopf posts it in the background)."""
    try:
        kopf.event(cast(kopf.Body, body), type=type_, reason=reason, message=message)
    except LookupError:  # outside a running operator (benchmarks, scripts): log only
        logger.info("%s: %s", reason, message)


def _key(child: Obj) -> str:
    return f"{child['kind']}/{child['metadata']['name']}"


def is_owned_by(child: Obj, owner: Mapping[str, Any]) -> bool:
    uid = owner["metadata"].get("uid")
    references = child.get("metadata", {}).get("ownerReferences", [])
    return any(reference.get("uid") == uid for reference in references)
