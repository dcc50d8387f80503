"""Which drain observation the engine pod template is built from, and status.drain.

The drain deadline and the grace period follow the engines' reports (llm_operator/drain_timing.py),
but both are in the pod template: applying each new reading would roll every pod whenever the
longest request changed. So a new reading is applied only when the template changes for another
reason (the spec, the model, the image); otherwise the template is built from the observation it
was built from last, which the Deployment records (`pagedock.dev/drain-observation`):

    live Deployment  template built from its recorded observation  observation applied
    none             -                                              the new reading
    present          the same as the live template                  the recorded one (no rollout)
    present          differs (something else changed)               the new reading

status.drain shows the reading, the deadline and grace period the template has now, and the
ones the next template change will apply.
"""

import dataclasses
import json
from collections.abc import Mapping
from typing import Any

from llm_operator.builders.children import drop_empty
from llm_operator.builders.context import BuildContext
from llm_operator.builders.engine import build_engine_config_map, build_engine_deployment
from llm_operator.drain_timing import DrainObservation
from llm_operator.fleet.drain_reports import DrainReading, EngineDrainReports
from llm_operator.k8s.diff import is_subset
from llm_operator.k8s.kube import KubeClient
from llm_operator.k8s.resources import KINDS
from llm_operator.names import DRAIN_OBSERVATION_ANNOTATION, LAST_APPLIED_ANNOTATION, engine_name
from llm_operator.settings import OperatorSettings

Obj = dict[str, Any]


@dataclasses.dataclass
class DrainSizing:
    kube: KubeClient
    settings: OperatorSettings
    reports: EngineDrainReports = dataclasses.field(init=False)
    _statuses: dict[tuple[str, str], Obj] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        self.reports = EngineDrainReports(self.kube, self.settings)

    def forget(self, namespace: str, name: str) -> None:
        self._statuses.pop((namespace, name), None)

    async def size(self, body: Mapping[str, Any], ctx: BuildContext) -> BuildContext:
        """`ctx` with the drain observation to build the engine pod template from; remembers
        status.drain for `status`."""
        path = KINDS["Deployment"].object_path(ctx.namespace, engine_name(ctx.name))
        live = await self.kube.get(path)
        reading = await self.reports.read(ctx.namespace, ctx.name, live)
        last = DrainReading.from_status((body.get("status") or {}).get("drain"))
        if reading is None or (not reading.has_requests and last is not None):
            reading = last
        observed = None if reading is None else reading.observation()
        applied = dataclasses.replace(
            ctx, drain_observation=observation_to_apply(ctx, observed, live)
        )
        self._statuses[ctx.namespace, ctx.name] = drain_status(applied, reading, observed)
        return applied

    def status(self, namespace: str, name: str) -> Obj | None:
        """status.drain as the last `size` of this LLMDeployment found it."""
        return self._statuses.get((namespace, name))


def observation_to_apply(
    ctx: BuildContext, observed: DrainObservation | None, live: Obj | None
) -> DrainObservation | None:
    """The observation the engine pod template is to be built from (the module's table)."""
    if live is None:
        return observed
    annotations = live["metadata"].get("annotations") or {}
    recorded = DrainObservation.from_annotation(annotations.get(DRAIN_OBSERVATION_ANNOTATION))
    if recorded == observed:
        return observed
    carried = dataclasses.replace(ctx, drain_observation=recorded)
    template = build_engine_deployment(carried, build_engine_config_map(carried))["spec"][
        "template"
    ]
    return recorded if _same_template(template, live) else observed


def _same_template(template: Obj, live: Obj) -> bool:
    """Whether `template` is the one last applied to the live Deployment (else the live one has
    all of it: a Deployment written before the annotation was)."""
    last_applied = (live["metadata"].get("annotations") or {}).get(LAST_APPLIED_ANNOTATION)
    if last_applied:
        applied = json.loads(last_applied).get("spec", {}).get("template")
        return bool(applied == json.loads(json.dumps(drop_empty(template))))
    return is_subset(drop_empty(template), live.get("spec", {}).get("template"))


def drain_status(
    ctx: BuildContext, reading: DrainReading | None, observed: DrainObservation | None
) -> Obj:
    """status.drain: the reading, and the deadline and grace period now and at the next change."""
    now, fresh = ctx.drain_timing, dataclasses.replace(ctx, drain_observation=observed).drain_timing
    timing = {
        "drainTimeoutSeconds": now.drain_timeout_seconds,
        "terminationGracePeriodSeconds": now.termination_grace_period_seconds,
        "nextDrainTimeoutSeconds": fresh.drain_timeout_seconds,
        "nextTerminationGracePeriodSeconds": fresh.termination_grace_period_seconds,
    }
    return {**({} if reading is None else reading.to_status()), **timing}
